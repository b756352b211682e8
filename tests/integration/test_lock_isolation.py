"""One row held by someone else (an operator's transaction, a slow migration, a frozen peer)
stalls only its own unit of work: the completer and the reconciler go on with the rest and
retry that one later (KNOWN-FAILURES 28), and a CLI command waits for it no longer than the
lock timeout (KNOWN-FAILURES 15). The lock is held by a second connection."""

from typing import Any

import psycopg
import structlog

from tests.support import Replica, make_reconciler, query, shell_task

WRITE_EVENTS = ("run_finished", "outcome_deferred")
TAKEOVER_EVENTS = ("run_taken_over", "reconcile_unit_failed")


def _hold_task_row(database_url: str, task_id: int) -> psycopg.Connection:
    holder = psycopg.connect(database_url)
    holder.execute("SELECT 1 FROM task WHERE id = %s FOR UPDATE", (task_id,))
    return holder


def _hold_occurrence_rows(database_url: str, task_id: int) -> psycopg.Connection:
    """The task's occurrence rows held: a recurring task's successes do not lock its task row
    (revision 0021), but they lock their occurrences."""
    holder = psycopg.connect(database_url)
    holder.execute("SELECT 1 FROM occurrence WHERE task_id = %s FOR UPDATE", (task_id,))
    return holder


def _locked_and_free(
    client: Any, pool: Any, executors: Any, url: str, instance: str
) -> tuple[Any, Any, Replica]:
    """Tasks `locked` and `free`, each triggered once, both launched by replica `instance`
    and finished (nothing completed yet): (locked, free, the replica)."""
    locked, free = shell_task(client, "locked"), shell_task(client, "free")
    for task in (locked, free):
        client.trigger(task.id, requested_by="test")
    replica = Replica(url, pool, executors, instance)
    assert replica.launcher.run_once().launched == 2
    replica.finished()
    return locked, free, replica


def test_a_locked_task_row_defers_only_its_own_completion(
    client, pool, executors, database_url
) -> None:
    # Would fail against a completer whose LockNotAvailable escaped run_once: the other run's
    # outcome would not be written either.
    locked, free, replica = _locked_and_free(client, pool, executors, database_url, "a")
    holder = _hold_occurrence_rows(database_url, locked.id)
    try:
        with structlog.testing.capture_logs() as logs:
            assert replica.completer.run_once().done == 1
        assert [e["task_id"] for e in logs if e["event"] == "outcome_deferred"] == [locked.id]
        # The locked run comes first in the held set, yet the free one is written before the
        # locked one's full lock wait: it would be last against a pass that waited in order.
        order = [(e["event"], e["task_id"]) for e in logs if e["event"] in WRITE_EVENTS]
        assert order == [("run_finished", free.id), ("outcome_deferred", locked.id)]
        rows = query(database_url, "SELECT task_id, status FROM occurrence ORDER BY task_id")
        assert rows == [
            {"task_id": locked.id, "status": "running"},
            {"task_id": free.id, "status": "success"},
        ]
        assert replica.completer.run_once().done == 0  # deferred: not retried on every pass
    finally:
        holder.close()
    (run,) = list(replica.held)
    run.retry_at = 0.0  # its deferral would pass in a couple of seconds
    assert replica.completer.run_once().done == 1
    assert {r["status"] for r in query(database_url, "SELECT status FROM occurrence")} == {
        "success"
    }


def test_a_locked_task_row_stops_only_its_own_takeover(
    client, pool, executors, database_url
) -> None:
    # Would fail against a reconciler pass that one LockNotAvailable aborted: the other orphan
    # would not be taken over, and the takeover bound would break on one row.
    # The owner "dies": nothing is completed or renewed.
    locked, _, _ = _locked_and_free(client, pool, executors, database_url, "dead")
    query(
        database_url,
        "UPDATE run SET lease_expires_at = now() - interval '2 s', "
        "takeover_at = now() - interval '1 s' RETURNING id",
    )
    reconciler = make_reconciler(pool, "r")
    holder = _hold_task_row(database_url, locked.id)
    try:
        with structlog.testing.capture_logs() as logs:
            report = reconciler.run_once()
        assert len(report.ids["taken_over"]) == 1
        assert [e["category"] for e in logs if e["event"] == "reconcile_unit_failed"] == [
            "taken_over"
        ]
        # The locked orphan has the lower id, yet the free one is taken over before the locked
        # one's full lock wait: it would be last against a pass that waited in id order.
        order = [e["event"] for e in logs if e["event"] in TAKEOVER_EVENTS]
        assert order == ["run_taken_over", "reconcile_unit_failed"]
    finally:
        holder.close()
    assert len(reconciler.run_once().ids["taken_over"]) == 1  # the next pass takes the other
    assert query(database_url, "SELECT id FROM run WHERE status = 'running'") == []


def test_cli_transactions_wait_at_most_the_lock_timeout_for_a_task_lock(cli, db, database_url):
    # KNOWN-FAILURES 15: a lock held by a vanished session must not hang the caller forever.
    cli("tasks", "add", "locked", "--every", "1h", "--command", "true")
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT id FROM task FOR UPDATE")
        result = cli("tasks", "trigger", "locked")
        holder.rollback()
    assert result.code == 1
    assert result.err.startswith("error: database error: canceling statement due to lock timeout")
