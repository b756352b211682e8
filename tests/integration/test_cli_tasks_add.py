"""`scheduler-daemon tasks add` against a real database: what a definition stores, and every
refused input as one line, exit 2, nothing written."""

from datetime import timedelta

import pytest

from tests.support import EVERY_MINUTE

pytestmark = pytest.mark.smoke


def test_every_task_is_anchored_at_creation_on_the_database_clock(cli, db) -> None:
    task = cli(
        "tasks", "add", "tick", "--every", "1h30m", "--http", "http://127.0.0.1:9/x", "--json"
    ).json()
    row = db.execute("SELECT anchor_at, created_at, next_run_at FROM task").fetchone()
    assert row["anchor_at"] == row["created_at"]
    assert row["next_run_at"] == row["anchor_at"] + timedelta(hours=1, minutes=30)
    assert task["every_seconds"] == 5400.0
    assert task["executor"] == "http"


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
