"""`scheduler-daemon tasks …` against a real database: the happy paths and every refused input."""

from datetime import UTC, datetime, timedelta

import pytest

pytestmark = pytest.mark.smoke

EVERY_MINUTE = ("--cron", "* * * * *", "--command", "true")


def test_add_then_show_and_list_print_the_documented_json(cli) -> None:
    added = cli(
        "tasks",
        "add",
        "backup",
        "--cron",
        "0 3 * * *",
        "--timezone",
        "Europe/Berlin",
        "--command",
        "pg_dump app",
        "--max-attempts",
        "3",
        "--backoff",
        "1m",
        "--json",
    )
    assert added.code == 0, added.err
    task = added.json()
    assert task["name"] == "backup"
    assert task["schedule_kind"] == "cron"
    assert task["timezone"] == "Europe/Berlin"
    assert task["overlap"] == "forbid"
    assert task["misfire"] == "run_once"
    assert task["max_attempts"] == 3
    assert task["backoff_seconds"] == 60.0
    next_run = datetime.fromisoformat(task["next_run_at"])
    assert next_run.astimezone(datetime.now(UTC).astimezone().tzinfo) > datetime.now(UTC)
    # 03:00 in Berlin is 01:00 or 02:00 UTC depending on DST
    assert next_run.astimezone(UTC).hour in (1, 2)
    assert cli("tasks", "show", "backup", "--json").json() == task
    assert cli("tasks", "show", str(task["id"]), "--json").json()["name"] == "backup"
    listed = cli("tasks", "list", "--json").json()
    assert [t["name"] for t in listed] == ["backup"]
    human = cli("tasks", "list")
    assert human.out.splitlines()[0].split()[:3] == ["ID", "NAME", "SCHEDULE"]
    assert "backup" in human.out


def test_every_task_is_anchored_at_creation_on_the_database_clock(cli, db) -> None:
    task = cli(
        "tasks", "add", "tick", "--every", "1h30m", "--http", "http://127.0.0.1:9/x", "--json"
    ).json()
    row = db.execute("SELECT anchor_at, created_at, next_run_at FROM task").fetchone()
    assert row["anchor_at"] == row["created_at"]
    assert row["next_run_at"] == row["anchor_at"] + timedelta(hours=1, minutes=30)
    assert task["every_seconds"] == 5400.0
    assert task["executor"] == "http"


def test_next_prints_fire_times_in_the_task_zone_and_utc(cli) -> None:
    cli(
        "tasks",
        "add",
        "ny",
        "--cron",
        "30 2 * * *",
        "--timezone",
        "America/New_York",
        "--call",
        "mymod:job",
    )
    rows = cli("tasks", "next", "ny", "-n", "3", "--json").json()
    assert len(rows) == 3
    for row in rows:
        local, utc = datetime.fromisoformat(row["local"]), datetime.fromisoformat(row["utc"])
        assert local == utc
        assert utc.utcoffset() == timedelta(0)


def test_pause_keeps_lifecycle_and_resume_schedules_from_now(cli, db) -> None:
    cli("tasks", "add", "p", *EVERY_MINUTE)
    db.execute("UPDATE task SET next_run_at = now() - interval '3 hours'")
    paused = cli("tasks", "pause", "p", "--json").json()
    assert paused["paused"] is True
    assert paused["status"] == "enabled"
    resumed = cli("tasks", "resume", "p", "--json").json()
    db_now = db.execute("SELECT now() AS n").fetchone()["n"]
    next_run = datetime.fromisoformat(resumed["next_run_at"])
    assert resumed["paused"] is False
    assert db_now < next_run <= db_now + timedelta(minutes=1)  # the missed 3 hours are not owed


def test_update_changes_the_definition_and_reschedules(cli) -> None:
    cli("tasks", "add", "u", *EVERY_MINUTE)
    updated = cli(
        "tasks", "update", "u", "--cron", "0 0 1 1 *", "--overlap", "queue", "--json"
    ).json()
    assert updated["cron"] == "0 0 1 1 *"
    assert updated["overlap"] == "queue"
    assert datetime.fromisoformat(updated["next_run_at"]).month == 1
    assert (
        cli("tasks", "update", "u", "--every", "5m", "--json").json()["schedule_kind"] == "interval"
    )


def test_trigger_queues_a_manual_occurrence_and_follows_forbid(cli, db) -> None:
    cli("tasks", "add", "t", *EVERY_MINUTE)
    first = cli("tasks", "trigger", "t", "--json").json()
    assert (first["status"], first["trigger"], first["occurrence_seq"]) == ("queued", "manual", 1)
    second = cli("tasks", "trigger", "t")
    assert second.code == 0
    assert "skipped: overlap" in second.out
    rows = db.execute(
        "SELECT occurrence_seq, status, reason FROM occurrence ORDER BY id"
    ).fetchall()
    assert rows == [
        {"occurrence_seq": 1, "status": "queued", "reason": None},
        {"occurrence_seq": 2, "status": "skipped", "reason": "overlap"},
    ]


def test_trigger_of_a_queue_task_queues_behind_the_active_one(cli, db) -> None:
    cli("tasks", "add", "q", *EVERY_MINUTE, "--overlap", "queue")
    cli("tasks", "trigger", "q")
    cli("tasks", "trigger", "q")
    statuses = [r["status"] for r in db.execute("SELECT status FROM occurrence ORDER BY id")]
    assert statuses == ["queued", "queued"]


def test_delete_is_refused_while_active_and_force_cancels_and_frees_the_name(
    cli, db, counts
) -> None:
    task = cli("tasks", "add", "d", *EVERY_MINUTE, "--json").json()
    cli("tasks", "trigger", "d")
    before = counts()
    refused = cli("tasks", "delete", "d")
    assert refused.code == 2
    assert refused.err.strip() == "error: task 'd' has 1 active occurrence(s); --force cancels them"
    assert counts() == before
    assert cli("tasks", "delete", "d", "--force").code == 0
    occ = db.execute("SELECT status, reason, lease_token FROM occurrence").fetchone()
    assert occ == {"status": "cancelled", "reason": "task deleted", "lease_token": 1}
    assert cli("tasks", "show", "d").code == 2
    history = cli("runs", "list", "--task", str(task["id"]), "--json").json()
    assert [(h["status"], h["task_id"]) for h in history] == [("cancelled", task["id"])]
    assert cli("tasks", "add", "d", *EVERY_MINUTE).code == 0  # the name is free again


def test_runs_list_shows_never_run_occurrences_newest_first_with_documented_fields(cli) -> None:
    cli("tasks", "add", "r", *EVERY_MINUTE, "--overlap", "allow")
    cli("tasks", "trigger", "r")
    cli("tasks", "trigger", "r")
    rows = cli("runs", "list", "--task", "r", "--json").json()
    assert [r["occurrence_seq"] for r in rows] == [2, 1]
    expected = {
        "id",
        "occurrence_id",
        "occurrence_seq",
        "task_id",
        "task_name",
        "scheduled_for",
        "trigger",
        "attempt",
        "status",
        "reason",
        "instance_id",
        "started_at",
        "finished_at",
        "exit_code",
        "error",
    }
    assert expected <= set(rows[0])
    assert rows[0]["id"] is None  # never ran
    assert datetime.fromisoformat(rows[0]["scheduled_for"]).utcoffset() is not None
    assert cli("runs", "list", "--status", "skipped", "--json").json() == []
    shown = cli("runs", "show", "--occurrence", str(rows[0]["occurrence_id"]), "--json").json()
    assert shown["runs"] == []
    assert shown["task_name"] == "r"


def test_config_set_and_show_the_fleet_budget(cli) -> None:
    assert cli("config", "show", "--json").json() == {"max-concurrent-runs": 16}
    assert cli("config", "set", "max-concurrent-runs", "4").code == 0
    assert cli("config", "show", "--json").json() == {"max-concurrent-runs": 4}


# -- bad input: one line on stderr, exit 2, nothing written -------------------------------------
BAD_INPUTS = [
    (("--cron", "61 * * * *", "--command", "true"), "invalid cron expression"),
    (("--cron", "* * *", "--command", "true"), "invalid cron expression"),
    (
        ("--cron", "* * * * *", "--timezone", "Mars/Olympus", "--command", "true"),
        "unknown time zone 'Mars/Olympus'",
    ),
    (("--at", "2001-01-01T00:00:00Z", "--command", "true"), "is in the past"),
    (("--at", "tomorrow", "--command", "true"), "not an ISO 8601 instant"),
    (("--every", "0s", "--command", "true"), "duration must be positive"),
    (("--every", "-5m", "--command", "true"), "duration must not be negative: '-5m'"),
    (("--every", "soon", "--command", "true"), "invalid duration 'soon'"),
    (("--every", "5m", "--timeout", "0s", "--command", "true"), "duration must be positive"),
    (
        ("--every", "5m", "--command", "true", "--misfire", "run_all"),
        "run_all with --overlap forbid",
    ),
    (("--every", "5m", "--command", "true", "--overlap", "sometimes"), "sometimes"),
    (("--every", "5m"), "give exactly one of --command, --http or --call"),
    (("--every", "5m", "--command", "true", "--http", "http://x"), "exactly one of"),
    (("--command", "true"), "give exactly one schedule"),
    (("--every", "5m", "--cron", "* * * * *", "--command", "true"), "give exactly one schedule"),
    (("--every", "5m", "--http", "ftp://host/x"), "needs an http:// or https:// URL"),
    (("--every", "5m", "--call", "not a target"), "needs MODULE:FUNCTION"),
    (("--every", "5m", "--command", "x" * 70_000), "the limit is 65536 bytes"),
    (("--every", "5m", "--command", "true", "--max-attempts", "0"), "--max-attempts must be"),
    (("--every", "5m", "--command", "true", "--catchup-limit", "0"), "--catchup-limit must be"),
]


@pytest.mark.parametrize(("args", "message"), BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_task_definitions_get_one_line_exit_2_and_write_nothing(
    cli, counts, args, message
) -> None:
    before = counts()
    result = cli("tasks", "add", "bad", *args)
    assert result.code == 2, result
    assert message in result.err
    assert result.err.count("\n") == 1
    assert result.err.startswith("error: ")
    assert result.out == ""
    assert counts() == before


def test_a_duplicate_name_is_refused_and_writes_nothing(cli, counts) -> None:
    assert cli("tasks", "add", "dup", *EVERY_MINUTE).code == 0
    before = counts()
    result = cli("tasks", "add", "dup", *EVERY_MINUTE)
    assert (result.code, result.err) == (2, "error: a task named 'dup' already exists\n")
    assert counts() == before


@pytest.mark.parametrize(
    "command",
    [
        ("tasks", "show"),
        ("tasks", "pause"),
        ("tasks", "resume"),
        ("tasks", "trigger"),
        ("tasks", "delete"),
        ("tasks", "next"),
        ("tasks", "update"),
    ],
)
def test_an_unknown_task_is_one_line_and_exit_2(cli, counts, command) -> None:
    before = counts()
    extra = ("--overlap", "allow") if command[1] == "update" else ()
    result = cli(*command, "nosuch", *extra)
    assert (result.code, result.err) == (2, "error: unknown task 'nosuch'\n")
    assert counts() == before


def test_bad_runs_and_config_arguments_are_refused(cli, counts) -> None:
    before = counts()
    assert cli("runs", "list", "--status", "weird").code == 2
    assert cli("runs", "list", "--task", "nosuch").err == "error: unknown task 'nosuch'\n"
    assert cli("runs", "show", "999").err == "error: unknown run 999\n"
    assert cli("config", "set", "max-concurrent-runs", "0").code == 2
    assert cli("config", "set", "nonsense", "1").code == 2
    assert counts() == before


def test_an_unreachable_database_is_exit_1_and_one_line_without_the_password(cli) -> None:
    result = cli("tasks", "list", url="postgresql://admin:s3cret-pw@127.0.0.1:1/app")
    assert result.code == 1
    assert result.err.startswith("error: cannot connect to the database at postgresql://admin:***@")
    assert result.err.count("\n") == 1
    assert "s3cret-pw" not in result.err + result.out


def test_commands_on_an_unmigrated_database_say_so_in_one_line(cli, empty_database_url) -> None:
    result = cli("tasks", "list", url=empty_database_url)
    assert (result.code, result.err) == (
        1,
        "error: the database has no scheduler-daemon schema: run `scheduler-daemon migrate`\n",
    )


def test_update_reads_a_naive_at_in_the_tasks_own_zone(cli) -> None:
    cli(
        "tasks",
        "add",
        "paris",
        "--at",
        "2031-01-01T08:00",
        "--timezone",
        "Europe/Paris",
        "--command",
        "true",
    )
    updated = cli("tasks", "update", "paris", "--at", "2031-01-01T09:00", "--json").json()
    assert updated["at"] == "2031-01-01T08:00:00+00:00"  # 09:00 in Paris is 08:00 UTC in winter


def test_cancelling_an_occurrence_shows_on_the_task(cli, db) -> None:
    cli("tasks", "add", "c", "--every", "1h", "--command", "true")
    occ = cli("tasks", "trigger", "c", "--json").json()
    cancelled = cli("runs", "cancel", "--occurrence", str(occ["id"]), "--json")
    assert cancelled.code == 0, cancelled.err
    assert cancelled.json()["status"] == "cancelled"
    task = db.execute("SELECT last_status, last_occurrence_id FROM task").fetchone()
    assert task == {"last_status": "cancelled", "last_occurrence_id": occ["id"]}
    again = cli("runs", "cancel", "--occurrence", str(occ["id"]))
    assert (again.code, again.err) == (2, f"error: occurrence {occ['id']} is already cancelled\n")


def test_the_python_api_mirrors_the_task_commands(database_url, cli) -> None:
    from datetime import timedelta

    from scheduler_daemon import Client, TaskSpec

    client = Client(database_url)
    task = client.add_task(
        TaskSpec(
            name="api",
            executor="python",
            target="tests.jobs:ok",
            every=timedelta(minutes=5),
            overlap="allow",
        )
    )
    assert cli("tasks", "show", "api", "--json").json()["target"] == "tests.jobs:ok"
    assert client.update_task("api", concurrency_key="k").spec.concurrency_key == "k"
    assert client.pause("api").spec.paused is True
    assert client.resume("api").spec.paused is False
    assert len(client.next_fire_times(task.id, 3)) == 3
    occurrence = client.trigger("api", requested_by="test")
    assert occurrence["status"] == "queued"
    assert [r["occurrence_id"] for r in client.list_runs(task="api")] == [occurrence["id"]]
    ended = client.delete("api", force=True, requested_by="test")
    assert [(o["id"], o["status"]) for o in ended] == [(occurrence["id"], "cancelled")]


def test_update_clears_optional_values_with_none(cli) -> None:
    cli(
        "tasks",
        "add",
        "opt",
        "--every",
        "1h",
        "--command",
        "true",
        "--timeout",
        "5m",
        "--concurrency-key",
        "k",
        "--start-deadline",
        "1m",
        "--overlap",
        "queue",
        "--misfire",
        "run_all",
        "--catchup-limit",
        "3",
        "--catchup-window",
        "1h",
    )
    cleared = cli(
        "tasks",
        "update",
        "opt",
        "--timeout",
        "none",
        "--concurrency-key",
        "None",
        "--start-deadline",
        "none",
        "--catchup-limit",
        "none",
        "--catchup-window",
        "none",
        "--json",
    ).json()
    assert [
        cleared[k]
        for k in (
            "timeout_seconds",
            "concurrency_key",
            "start_deadline_seconds",
            "catchup_limit",
            "catchup_window_seconds",
        )
    ] == [None] * 5
    assert (
        cli("tasks", "add", "x", "--every", "1h", "--command", "true", "--timeout", "none").code
        == 2
    )  # only update clears


def test_secret_headers_and_url_passwords_are_masked_unless_show_secrets(cli) -> None:
    added = cli(
        "tasks",
        "add",
        "hook",
        "--every",
        "1h",
        "--http",
        "https://robot:pw-in-url@hook.example/run",
        "--header",
        "Authorization: Bearer tok-1",
        "--header",
        "X-Request-Source: scheduler",
        "--json",
    )
    assert added.code == 0, added.err
    masked = {"Authorization": "***", "X-Request-Source": "scheduler"}
    for output in (added.json(), cli("tasks", "show", "hook", "--json").json()):
        assert output["headers"] == masked
        assert output["target"] == "https://robot:***@hook.example/run"
    assert cli("tasks", "list", "--json").json()[0]["headers"] == masked
    text = cli("tasks", "show", "hook").out
    assert "tok-1" not in text
    assert "pw-in-url" not in text
    shown = cli("tasks", "show", "hook", "--show-secrets", "--json").json()
    assert shown["headers"]["Authorization"] == "Bearer tok-1"
    assert shown["target"] == "https://robot:pw-in-url@hook.example/run"
    listed = cli("tasks", "list", "--show-secrets", "--json").json()
    assert listed[0]["headers"]["Authorization"] == "Bearer tok-1"

    updated = cli("tasks", "update", "hook", "--header", "X-Api-Key: k-2", "--json").json()
    assert updated["headers"] == {"X-Api-Key": "***"}  # the given set replaces the old one
    assert cli("tasks", "update", "hook", "--header", "none", "--json").json()["headers"] == {}


def test_a_bad_header_is_one_line_without_its_value(cli, counts) -> None:
    before = counts()
    bad = cli("tasks", "add", "h", "--every", "1h", "--http", "https://x/", "--header", "tok-3")
    assert (bad.code, bad.err) == (
        2,
        "error: --header needs 'NAME: VALUE' (what was given is not shown)\n",
    )
    shell = cli("tasks", "add", "s", "--every", "1h", "--command", "true", "--header", "A: b")
    assert (shell.code, shell.err) == (2, "error: --header is for --http tasks only\n")
    assert counts() == before
