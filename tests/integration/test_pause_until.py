"""`tasks pause --until` against a real database: the reconciler resumes the task at the instant
(database clock) exactly as `tasks resume` would, records it as `scheduler`'s action, and an
operator's resume or plain pause before then clears the pending end; bad input writes nothing."""

import threading
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.conftest import row_counts
from tests.support import EVERY_MINUTE, make_reconciler, query, wait_for


def _db_now(url: str) -> datetime:
    return query(url, "SELECT now() AS n")[0]["n"]


def _task(url: str) -> dict[str, Any]:
    return query(url, "SELECT id, paused, paused_until, next_run_at FROM task")[0]


def test_a_pause_until_ends_by_itself_at_its_instant_as_a_resume(cli, pool, database_url) -> None:
    cli("tasks", "add", "p", *EVERY_MINUTE)
    query(database_url, "UPDATE task SET next_run_at = now() - interval '3 hours'")
    shown = cli("tasks", "pause", "p", "--until", "2s", "--json").json()
    until = datetime.fromisoformat(shown["paused_until"])
    assert shown["paused"] is True
    # `status` shows the pending resume (JSON and text), `tasks show` its end.
    task_id = _task(database_url)["id"]
    pending = {"id": task_id, "name": "p", "paused_until": shown["paused_until"]}
    assert cli("status", "--json").json()["pending_resumes"] == [pending]
    assert f"paused until {shown['paused_until']}: p (id {task_id})" in cli("status").out
    assert cli("tasks", "show", "p", "--json").json()["paused_until"] == shown["paused_until"]
    # Before the instant a pass changes nothing (fails if the scan ignored the instant).
    assert make_reconciler(pool).run_once().ids["resumed_tasks"] == []
    assert _task(database_url)["paused"] is True
    wait_for(lambda: _db_now(database_url) > until, message="the pause's end on the db clock")
    report = make_reconciler(pool).run_once()
    task = _task(database_url)
    assert report.ids["resumed_tasks"] == [task["id"]]
    assert task["paused"] is False
    assert task["paused_until"] is None
    # Paused time owes nothing: the next firing is after the end, and the only row is the one
    # `pause` recorded for what was due before it.
    assert until < task["next_run_at"] <= _db_now(database_url) + timedelta(minutes=1)
    rows = query(database_url, "SELECT status, reason FROM occurrence")
    assert rows == [{"status": "skipped", "reason": "paused"}]
    actions = query(database_url, "SELECT actor, action, source FROM operator_action ORDER BY id")
    assert [a["action"] for a in actions] == ["pause", "resume"]
    assert actions[1] == {"actor": "scheduler", "action": "resume", "source": "scheduler"}
    # The resume is a task event (the history trigger): the task active again from then on.
    (event,) = query(
        database_url,
        "SELECT active, at FROM task_event WHERE kind = 'changed' ORDER BY id DESC LIMIT 1",
    )
    assert event["active"] is True
    assert event["at"] >= until
    assert cli("status", "--json").json()["pending_resumes"] == []
    # A second pass resumes nothing more.
    assert make_reconciler(pool).run_once().ids["resumed_tasks"] == []
    assert len(query(database_url, "SELECT id FROM operator_action")) == 2


@pytest.mark.parametrize("clearing", [("resume",), ("pause",)])
def test_a_resume_or_a_plain_pause_before_the_instant_clears_the_pending_end(
    cli, pool, database_url, clearing: tuple[str, ...]
) -> None:
    cli("tasks", "add", "p", *EVERY_MINUTE)
    shown = cli("tasks", "pause", "p", "--until", "1s", "--json").json()
    until = datetime.fromisoformat(shown["paused_until"])
    after = cli("tasks", *clearing, "p", "--json").json()
    assert after["paused_until"] is None
    wait_for(lambda: _db_now(database_url) > until, message="the old end on the db clock")
    assert make_reconciler(pool).run_once().ids["resumed_tasks"] == []
    assert _task(database_url)["paused"] is (clearing == ("pause",))
    assert query(database_url, "SELECT 1 FROM operator_action WHERE source = 'scheduler'") == []


@pytest.mark.parametrize(
    ("until", "says"),
    [
        ("2020-01-01T00:00:00Z", "is not after now"),
        ("2099-01-01T00:00:00", "needs an offset"),
        ("tomorrow", "is neither a duration"),
        ("-5m", "is neither a duration"),
        # Past 100 years: an OverflowError traceback, or the database's "timestamp too large"
        # (exit 1), before the bound (found by review).
        ("999999999d", "is longer than 36525 days"),
        ("9999-12-31T23:59:59-05:00", "more than 36525 days after now"),
    ],
)
def test_a_bad_or_past_end_is_one_line_exit_2_and_nothing_written(
    cli, db, until: str, says: str
) -> None:
    cli("tasks", "add", "p", *EVERY_MINUTE)
    before = (row_counts(db), db.execute("SELECT * FROM task").fetchall())
    result = cli("tasks", "pause", "p", "--until", until)
    assert result.code == 2
    assert says in result.err
    assert result.err.count("\n") == 1
    assert (row_counts(db), db.execute("SELECT * FROM task").fetchall()) == before
    assert db.execute("SELECT count(*) AS n FROM operator_action").fetchone()["n"] == 0


def test_the_daemon_role_ends_a_pause_only_through_its_function_and_only_once_due(
    cli, database_url
) -> None:
    """The daemon role may not write `paused` (test_roles) nor insert an operator action: it ends
    a `--until` pause through sd_end_pause_v1 alone, which refuses a pause not yet due. Fails on
    a reconciler that updated the row itself (permission denied under the daemon role)."""
    from scheduler_daemon.storage.database import make_pool
    from tests.role_fleet import role_fleet

    with role_fleet(database_url) as fleet:
        operator, daemon = fleet.url(fleet.names.operator), fleet.url(fleet.names.daemon)
        assert cli("tasks", "add", "p", *EVERY_MINUTE, url=operator).code == 0
        shown = cli("tasks", "pause", "p", "--until", "1s", "--json", url=operator)
        assert shown.code == 0, shown.err
        until = datetime.fromisoformat(shown.json()["paused_until"])
        task_id = _task(database_url)["id"]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            query(daemon, "UPDATE task SET paused = false WHERE id = %s", (task_id,))
        early = query(
            daemon, "SELECT sd_end_pause_v1(%s, NULL, 'enabled', NULL) AS ended", (task_id,)
        )
        assert early == [{"ended": False}]  # not before its instant, whoever asks
        wait_for(lambda: _db_now(database_url) > until, message="the end on the db clock")
        pool = make_pool(daemon, max_size=1, name="daemon-role")
        pool.open(wait=True)
        try:
            report = make_reconciler(pool).run_once()
        finally:
            pool.close()
        assert report.ids["resumed_tasks"] == [task_id]
        assert _task(database_url)["paused"] is False
        (action,) = query(
            database_url, "SELECT actor, source FROM operator_action WHERE action = 'resume'"
        )
        assert action == {"actor": "scheduler", "source": "scheduler"}
        # Only the daemon role may call it (revision 0035; PUBLIC could, found by review), and
        # its search path puts pg_temp last, so a temporary `task` table cannot stand in.
        reader = fleet.url(fleet.names.reader)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            query(reader, "SELECT sd_end_pause_v1(%s, NULL, 'enabled', NULL)", (task_id,))
        (config,) = query(
            database_url, "SELECT proconfig FROM pg_proc WHERE proname = 'sd_end_pause_v1'"
        )
        assert config["proconfig"] == ["search_path=public, pg_temp"]


def test_an_operator_pause_inside_the_reconcilers_window_wins(cli, pool, database_url) -> None:
    """The race: a reconciler's scan saw an ended pause, and before it locks the task an
    operator pauses it again (a plain pause clears the end). A second session holds the task's
    row while the reconciler waits on it, writes what a plain pause writes, and commits. Fails on
    a fix that trusted its scan instead of re-checking under the lock (it would resume the task
    the operator just paused)."""
    cli("tasks", "add", "p", *EVERY_MINUTE)
    shown = cli("tasks", "pause", "p", "--until", "1s", "--json").json()
    until = datetime.fromisoformat(shown["paused_until"])
    wait_for(lambda: _db_now(database_url) > until, message="the end on the db clock")
    reports: list[Any] = []
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT id FROM task FOR UPDATE")
        passing = threading.Thread(target=lambda: reports.append(make_reconciler(pool).run_once()))
        passing.start()
        wait_for(
            lambda: query(
                database_url,
                "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()",
            ),
            message="the reconciler to wait on the task's lock",
        )
        holder.execute("UPDATE task SET paused_until = NULL")  # what a plain pause writes
        holder.commit()
        passing.join(60)
    assert not passing.is_alive()
    assert reports[0].ids["resumed_tasks"] == []
    task = _task(database_url)
    assert task["paused"] is True
    assert task["paused_until"] is None
    assert query(database_url, "SELECT 1 FROM operator_action WHERE source = 'scheduler'") == []


def test_a_firing_at_the_pauses_end_is_owed(cli, pool, database_url) -> None:
    """`pause --until T` where T is a firing instant: the pause covers the time before T, so the
    firing at T is owed, though the reconciler resumes the task a pass later. Fails before
    revision 0035's fix (found by review): the next firing was planned from the pass, after T,
    and the firing at T was neither run nor recorded."""
    assert cli("tasks", "add", "p", "--every", "3s", "--command", "true").code == 0
    firing = _task(database_url)["next_run_at"]
    while firing - _db_now(database_url) < timedelta(seconds=1):
        firing += timedelta(seconds=3)
    shown = cli("tasks", "pause", "p", "--until", firing.isoformat(), "--json")
    assert shown.code == 0, shown.err
    until = datetime.fromisoformat(shown.json()["paused_until"])
    assert until == firing
    wait_for(lambda: _db_now(database_url) > until, message="the end on the db clock")
    assert make_reconciler(pool).run_once().ids["resumed_tasks"] == [_task(database_url)["id"]]
    assert _task(database_url)["next_run_at"] == until  # due: the dispatch's misfire rules apply
