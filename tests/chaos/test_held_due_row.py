"""A due task whose row a second session holds `FOR UPDATE` costs an idle daemon nothing (issue 31
item 4): the dispatcher's due scan skips the row (SKIP LOCKED), backs off from it until its next
poll instead of dispatching again at once, and says so in one log line for the whole spell."""

import json
import time
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from tests.support import query, wait_for

pytestmark = pytest.mark.slow

WINDOW = 4.0  # seconds over which a commit rate is measured


def _events(log: str, event: str) -> list[dict]:
    lines = (line for line in log.splitlines() if f'"{event}"' in line)
    return [e for e in map(json.loads, lines) if e.get("event") == event]


def _commits(url: str) -> int:
    """The test database's committed transactions so far, read from another database's session
    (so reading costs the count nothing), with a fresh statistics snapshot."""
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (name,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def _commit_rate(url: str) -> float:
    """Commits a second over WINDOW. A backend flushes its counters about once a second while
    busy, so the window is several seconds long; sleeping is the measurement here, not a wait
    for an event."""
    before = _commits(url)
    time.sleep(WINDOW)
    return (_commits(url) - before) / WINDOW


def test_a_due_row_held_by_another_session_keeps_an_idle_daemon_at_its_idle_rate(
    spawn, cli, database_url
) -> None:
    # Would fail against 518d2f3: the pacing took the held task's due time, still past after
    # every dispatch, as "dispatch again in 20 ms", so the daemon ran a dispatch and a claim
    # 50 times a second for as long as the row was held, and logged nothing.
    assert cli("tasks", "add", "held", "--every", "1h", "--command", "true").code == 0
    (task,) = query(database_url, "SELECT id FROM task")
    daemon = spawn(database_url, "idle", "--poll-interval", "1s")  # after FAST's 200 ms: wins
    instance_id = daemon.instance_id()
    time.sleep(1.5)  # past the start-up's own transactions, whose counters come late
    idle = _commit_rate(database_url)

    holder = psycopg.connect(database_url)
    try:
        # Due in a second, and held from now on: the daemon sees it due only while it is held.
        query(
            database_url,
            "UPDATE task SET next_run_at = now() + interval '1 second' WHERE id = %s",
            (task["id"],),
        )
        holder.execute("SELECT id FROM task WHERE id = %s FOR UPDATE", (task["id"],))
        wait_for(
            lambda: query(
                database_url,
                "SELECT 1 FROM task WHERE id = %s AND next_run_at < now() - interval '0.5 s'",
                (task["id"],),
            ),
            message="the held task to fall due",
        )
        held = _commit_rate(database_url)
        assert query(database_url, "SELECT 1 FROM occurrence") == []  # nothing got past the lock
        locked = _events(daemon.log(), "due_task_locked")
    finally:
        holder.close()  # its transaction ends, and with it the lock
    assert held < 2 * idle + 5, f"{held:.1f} commits/s while the row was held, {idle:.1f} idle"
    assert len(locked) == 1, locked  # once for the whole spell, not once a pass
    assert locked[0]["task_id"] == task["id"]
    assert locked[0]["instance_id"] == instance_id
    assert locked[0]["level"] == "warning"
    wait_for(
        lambda: query(database_url, "SELECT 1 FROM occurrence WHERE task_id = %s", (task["id"],)),
        message="the task to be dispatched once the holder let go",
    )
    wait_for(
        lambda: _events(daemon.log(), "due_task_unlocked"),
        message="the daemon to say the spell ended",
    )
    assert len(_events(daemon.log(), "due_task_locked")) == 1
    assert daemon.stop() == 0, daemon.log()
