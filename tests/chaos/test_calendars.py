"""Exclusion calendars with a real daemon (ADR 0025, guarantee 20): of two every-second tasks,
the one whose calendar holds today (UTC, the tasks' zone) never runs while the other does; its
firings are recorded `excluded` (a run of them one row, extended by each pass) and the audit is
clean."""

from datetime import timedelta

import pytest

from tests.support import query, wait_for

pytestmark = pytest.mark.slow


def _runs(url: str, task: str) -> int:
    return query(
        url,
        "SELECT count(*) AS n FROM run r JOIN occurrence o ON o.id = r.occurrence_id "
        "JOIN task t ON t.id = o.task_id WHERE t.name = %s",
        (task,),
    )[0]["n"]


def test_a_daemon_runs_the_task_not_excluded_today_and_records_the_other_excluded(
    spawn, cli, database_url
) -> None:
    url = database_url
    today = query(url, "SELECT (now() AT TIME ZONE 'UTC')::date AS d")[0]["d"]
    # Today and tomorrow: a run that crosses midnight UTC stays excluded.
    span = f"{today}..{today + timedelta(days=1)}"
    assert cli("calendars", "add", "today", "--range", span).code == 0
    every = ("--every", "1s", "--command", "true")
    held = cli("tasks", "add", "held", *every, "--exclude-calendar", "today")
    assert held.code == 0, held.err
    assert cli("tasks", "add", "free", *every).code == 0
    daemon = spawn(url, "a")
    daemon.instance_id()
    wait_for(lambda: _runs(url, "free") >= 3, message="the task not excluded to run")
    assert daemon.stop() == 0, daemon.log()[-3000:]
    stopped = query(url, "SELECT now() AS t")[0]["t"]
    assert _runs(url, "held") == 0
    rows = query(
        url,
        "SELECT o.status, o.reason, o.firing_count, o.last_scheduled_for FROM occurrence o "
        "JOIN task t ON t.id = o.task_id WHERE t.name = 'held'",
    )
    # One row, extended pass by pass as the firings fell due (never ahead of them).
    assert [(r["status"], r["reason"]) for r in rows] == [("skipped", "excluded")]
    assert rows[0]["firing_count"] >= 3
    assert rows[0]["last_scheduled_for"] <= stopped
    (task,) = query(url, "SELECT next_run_at FROM task WHERE name = 'held'")
    assert task["next_run_at"] <= stopped + timedelta(seconds=2)  # the schedule's own next
    audit = cli("audit", "--until", stopped.isoformat(), "--settle", "2s", url=url)
    assert audit.code == 0, audit.out[-5000:] + audit.err
