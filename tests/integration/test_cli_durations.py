"""Durations as the command line takes them: in a flag, a SCHEDULER_* variable and a task field,
every accepted form reaches the setting and every refused one is one line, exit 2, no write."""

import pytest

pytestmark = pytest.mark.smoke

SHELL = ("--command", "true")


@pytest.mark.parametrize(
    ("args", "field", "seconds"),
    [
        (("--every", "0.5s"), "every_seconds", 0.5),
        (("--every", "1.5h"), "every_seconds", 5400.0),
        (("--every", "1h30m"), "every_seconds", 5400.0),
        (("--every", "90"), "every_seconds", 90.0),
        (("--every", "PT0.25S"), "every_seconds", 0.25),
        (("--every", "1m", "--timeout", "1.5h"), "timeout_seconds", 5400.0),
        (("--every", "1m", "--start-deadline", "0.5"), "start_deadline_seconds", 0.5),
        (("--every", "1m", "--catchup-window", "2.5m"), "catchup_window_seconds", 150.0),
        (("--every", "1m", "--backoff", "0"), "backoff_seconds", 0.0),
        (("--every", "1m", "--backoff", "0.1s"), "backoff_seconds", 0.1),
        (("--every", "1m", "--misfire-grace", "0s"), "misfire_grace_seconds", 0.0),
        (("--every", "1m", "--misfire-grace", "1500ms"), "misfire_grace_seconds", 1.5),
    ],
)
def test_a_task_field_takes_fractions_bare_seconds_and_zero_where_it_means_something(
    cli, args, field, seconds
) -> None:
    added = cli("tasks", "add", "t", *args, *SHELL, "--json")
    assert added.code == 0, added.err
    assert added.json()[field] == seconds
    updated = cli("tasks", "update", "t", *args, "--json")
    assert updated.code == 0, updated.err
    assert updated.json()[field] == seconds


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--every", "0"), "Invalid value for '--every': duration must be positive: '0'"),
        (("--every", "-5"), "duration must not be negative: '-5'"),
        (("--every", "0.5us"), "duration under 1us: '0.5us'"),
        (("--every", "1.0000001s"), "duration finer than 1us: '1.0000001s'"),
        (("--every", "1m", "--timeout", "0"), "'--timeout': duration must be positive: '0'"),
        (("--every", "1m", "--start-deadline", "0s"), "duration must be positive"),
        (("--every", "1m", "--catchup-window", "PT0S"), "duration must be positive"),
        (("--every", "1m", "--backoff", "-1s"), "duration must not be negative: '-1s'"),
        (("--every", "1m", "--misfire-grace", "-0.5"), "duration must not be negative"),
        (("--every", "1.5.5h"), "invalid duration '1.5.5h'"),
    ],
)
def test_a_refused_task_duration_is_one_line_exit_2_and_writes_nothing(
    cli, counts, args, message
) -> None:
    before = counts()
    result = cli("tasks", "add", "t", *args, *SHELL)
    assert result.code == 2, result
    assert message in result.err
    assert result.err.startswith("error: ")
    assert result.err.count("\n") == 1
    assert counts() == before


def test_run_flags_take_fractions_bare_seconds_and_a_zero_drain_timeout(cli, counts) -> None:
    # Each case stops at a settings check that comes after parsing, so the daemon never starts:
    # the message proves which values the parser let through.
    before = counts()
    result = cli("run", "--poll-interval", "0.5s", "--reconcile-interval", "0.25")
    assert result.err == ("error: --reconcile-interval must not be shorter than --poll-interval\n")
    result = cli("run", "--drain-timeout", "0", "--concurrency", "0")
    assert result.err == "error: --concurrency must be at least 1\n"  # 0 passed the parser
    result = cli("run", "--lease-ttl", "10", "--instance-expiry", "10.5")
    assert result.err == (
        "error: --instance-expiry must be longer than --lease-ttl plus --lease-grace\n"
    )
    assert counts() == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--poll-interval", "0"),
            "Invalid value for '--poll-interval': duration must be positive",
        ),
        (("--poll-interval", "-0.5s"), "duration must not be negative: '-0.5s'"),
        (("--drain-timeout", "-1"), "duration must not be negative: '-1'"),
        (("--lease-ttl", "0.1us"), "duration under 1us: '0.1us'"),
        (("--stop-timeout", "0s"), "'--stop-timeout': duration must be positive"),
        (
            ("--metrics-task-limit", "-1"),
            "--metrics-task-limit must be between 0 (no per-task gauges) and 10,000",
        ),
        (("--metrics-task-limit", "all"), "'all' is not a valid integer"),
    ],
)
def test_a_refused_run_flag_is_one_line_and_exit_2(cli, counts, args, message) -> None:
    before = counts()
    result = cli("run", *args)
    assert result.code == 2, result
    assert message in result.err
    assert result.err.count("\n") == 1
    assert counts() == before


def test_the_task_limit_variable_is_refused_like_its_flag(cli, counts, monkeypatch) -> None:
    before = counts()
    monkeypatch.setenv("SCHEDULER_METRICS_TASK_LIMIT", "10001")
    result = cli("run")
    assert (result.code, result.err) == (
        2,
        "error: --metrics-task-limit must be between 0 (no per-task gauges) and 10,000\n",
    )
    assert counts() == before


def test_scheduler_variables_take_the_same_forms_and_refuse_the_same(
    cli, counts, monkeypatch
) -> None:
    before = counts()
    monkeypatch.setenv("SCHEDULER_POLL_INTERVAL", "0.5")
    monkeypatch.setenv("SCHEDULER_RECONCILE_INTERVAL", "0.25s")
    result = cli("run")
    assert result.err == ("error: --reconcile-interval must not be shorter than --poll-interval\n")
    monkeypatch.setenv("SCHEDULER_RECONCILE_INTERVAL", "1.5")
    monkeypatch.setenv("SCHEDULER_DRAIN_TIMEOUT", "0")
    monkeypatch.setenv("SCHEDULER_CONCURRENCY", "0")
    assert cli("run").err == "error: --concurrency must be at least 1\n"
    monkeypatch.setenv("SCHEDULER_LEASE_TTL", "10")
    monkeypatch.setenv("SCHEDULER_LEASE_GRACE", "0.5s")
    recovered = cli("recover", "--dry-run", "--json")
    assert recovered.code == 0, recovered.err
    monkeypatch.setenv("SCHEDULER_LEASE_TTL", "-10")
    refused = cli("recover", "--dry-run")
    assert refused.code == 2
    assert "duration must not be negative: '-10'" in refused.err
    assert refused.err.count("\n") == 1
    assert counts() == before


def test_audit_settle_accepts_zero_and_since_refuses_it(cli) -> None:
    assert cli("audit", "--settle", "0", "--json").code == 0
    refused = cli("audit", "--since", "0")
    assert refused.code == 2
    assert "duration must be positive: '0'" in refused.err
