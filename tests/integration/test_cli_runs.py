"""`scheduler-daemon runs list / show / cancel` against a real database."""

from datetime import datetime

import pytest

from tests.support import EVERY_MINUTE, launched_shell_run, query

pytestmark = pytest.mark.smoke


def test_runs_list_shows_never_run_occurrences_newest_first_with_documented_fields(cli) -> None:
    cli("tasks", "add", "r", *EVERY_MINUTE, "--overlap", "allow")
    cli("tasks", "trigger", "r")
    cli("tasks", "trigger", "r")
    rows = cli("runs", "list", "--task", "r", "--json").json()
    assert [r["occurrence_seq"] for r in rows] == [2, 1]
    columns = (
        "id occurrence_id occurrence_seq task_id task_name scheduled_for trigger attempt status"
        " reason instance_id started_at finished_at exit_code error"
    )
    expected = set(columns.split())
    assert expected <= set(rows[0])
    assert rows[0]["id"] is None  # never ran
    assert datetime.fromisoformat(rows[0]["scheduled_for"]).utcoffset() is not None
    assert cli("runs", "list", "--status", "skipped", "--json").json() == []
    shown = cli("runs", "show", "--occurrence", str(rows[0]["occurrence_id"]), "--json").json()
    assert shown["runs"] == []
    assert shown["task_name"] == "r"


def test_cancelling_an_occurrence_shows_on_the_task(cli, db) -> None:
    cli("tasks", "add", "c", "--every", "1h", "--command", "true")
    occ = cli("tasks", "trigger", "c", "--json").json()
    cancelled = cli("runs", "cancel", "--occurrence", str(occ["id"]), "--json")
    assert cancelled.code == 0, cancelled.err
    assert cancelled.json()["status"] == "cancelled"
    shown = cli("tasks", "show", "c", "--json").json()  # read from its occurrences (issue 45)
    assert (shown["last_status"], shown["last_outcome_seq"]) == ("cancelled", occ["occurrence_seq"])
    again = cli("runs", "cancel", "--occurrence", str(occ["id"]))
    assert (again.code, again.err) == (2, f"error: occurrence {occ['id']} is already cancelled\n")


def test_runs_list_shows_a_failed_runs_duration_and_short_error(
    cli, client, pool, executors, database_url
) -> None:
    boom = {"name": "boom", "command": "sleep 0.2; exit 3"}
    replica = launched_shell_run(client, pool, executors, database_url, **boom).replica
    (run,) = replica.finished()
    assert replica.completer.complete(run) == "recorded"
    (row,) = query(database_url, "SELECT finished_at - started_at AS took FROM run")
    rows = cli("runs", "list", "--task", "boom", "--json").json()
    assert [(r["status"], r["error_summary"]) for r in rows] == [("failed", "exit code 3")]
    assert rows[0]["duration_seconds"] == round(row["took"].total_seconds(), 3)
    assert rows[0]["duration_seconds"] >= 0.2
    text = cli("runs", "list", "--task", "boom").out.splitlines()
    assert text[0].split()[-2:] == ["DURATION_SECONDS", "ERROR_SUMMARY"]
    assert text[1].split()[-4:] == [str(rows[0]["duration_seconds"]), "exit", "code", "3"]


def test_runs_logs_of_a_running_run_nobody_follows_prints_nothing_and_says_how_to_follow(
    cli, client, pool, executors, database_url
) -> None:
    run = launched_shell_run(
        client, pool, executors, database_url, name="quiet", command="echo hi; sleep 30"
    ).run
    shown = cli("runs", "logs", str(run.run_id))
    assert (shown.code, shown.out) == (0, "")
    assert shown.err.startswith(f"run {run.run_id} is running;")
    assert f"runs logs -f {run.run_id}" in shown.err
    assert cli("runs", "logs", str(run.run_id), "--json").json()["output_tail"] is None
