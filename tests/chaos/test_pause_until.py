"""`tasks pause --until` with real daemons (issue 38 item 1): the pause's end is a row, so it
survives a daemon restart and a database restart in the middle of the pause; the task resumes
once, at or after the instant on the database clock, with no row for the paused time, and the
audit is clean."""

import pytest

from scheduler_daemon.storage import migration
from tests.support import OUTAGE_STEPS_TIMEOUT, query, wait_for

pytestmark = pytest.mark.slow


def _scheduled(url: str) -> list[dict]:
    return query(
        url,
        "SELECT scheduled_for, status, reason FROM occurrence WHERE trigger = 'schedule' "
        "ORDER BY scheduled_for",
    )


def test_pause_until_resumes_once_across_a_daemon_and_a_database_restart(
    spawn, cli, owned_server
) -> None:
    owned_server.start()
    url = owned_server.url
    migration.upgrade(url)
    assert cli("tasks", "add", "tick", "--every", "1s", "--command", "true", url=url).code == 0
    first = spawn(url, "first")
    first.instance_id()
    wait_for(
        lambda: len([r for r in _scheduled(url) if r["status"] == "success"]) >= 2,
        message="the task to fire before the pause",
    )
    paused = cli("tasks", "pause", "tick", "--until", "15s", "--json", url=url)
    assert paused.code == 0, paused.err
    until = paused.json()["paused_until"]
    (pause,) = query(url, "SELECT at FROM operator_action WHERE action = 'pause'")
    # Both restarts inside the pause: the daemon that saw it goes, another comes, and the
    # server itself restarts (every session and pooled connection lost).
    assert first.stop() == 0, first.log()
    second = spawn(url, "second")
    second.instance_id()
    owned_server.restart()
    (row,) = query(url, "SELECT paused, paused_until FROM task")
    assert row["paused"] is True
    assert row["paused_until"].isoformat() == until
    wait_for(
        lambda: not query(url, "SELECT paused FROM task")[0]["paused"],
        timeout=OUTAGE_STEPS_TIMEOUT,
        message="the pause to end by itself",
    )
    ended = query(url, "SELECT paused_until FROM task")[0]
    assert ended["paused_until"] is None
    wait_for(
        lambda: [
            r
            for r in _scheduled(url)
            if r["scheduled_for"] > row["paused_until"] and r["status"] == "success"
        ],
        timeout=30,
        message="a firing after the pause",
    )
    assert second.stop() == 0, second.log()
    stopped = query(url, "SELECT now() AS t")[0]
    resumes = query(
        url, "SELECT at, actor, source FROM operator_action WHERE action = 'resume' ORDER BY id"
    )
    # Resumed once (the restarted daemon's passes and the one resume), never before the end.
    assert [(r["actor"], r["source"]) for r in resumes] == [("scheduler", "scheduler")]
    assert resumes[0]["at"] >= row["paused_until"]
    # No row for the paused time: nothing scheduled between the pause and its end.
    inside = [r for r in _scheduled(url) if pause["at"] < r["scheduled_for"] <= row["paused_until"]]
    assert inside == [], inside
    audit = cli("audit", "--until", stopped["t"].isoformat(), "--settle", "2s", url=url)
    assert audit.code == 0, audit.out[-5000:] + audit.err
