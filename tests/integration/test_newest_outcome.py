"""A recurring task's row off the success path (revision 0021): its successes neither wait for
nor write its row, what `tasks list/show` shows comes from its occurrences, and a one-shot task
is still finalized in the transaction of its deciding occurrence."""

from datetime import timedelta
from typing import Any

import psycopg

from scheduler_daemon.domain.task import TaskSpec
from tests.support import Replica, query, shell_task, wait_for


def _row(url: str, task_id: int) -> dict[str, Any]:
    (row,) = query(
        url,
        "SELECT status, last_outcome_seq, last_status, last_error FROM task WHERE id = %s",
        (task_id,),
    )
    return row


def test_a_recurring_tasks_successes_neither_wait_for_nor_write_its_row(
    cli, client, pool, executors, database_url
) -> None:
    """Fails on sd_succeed_runs_v3, which locks the task row first: with the row held by
    another session (an operator's `tasks update`), the batch meets its lock timeout and
    nothing is written; on v4 the batch is written and the row is untouched."""
    task = shell_task(client, overlap="allow")
    for _ in range(2):
        client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 2
    replica.finished()
    before = _row(database_url, task.id)
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT 1 FROM task WHERE id = %s FOR UPDATE", (task.id,))
        result = replica.completer.run_once()
        assert (result.done, result.fenced, len(result.finished)) == (2, 0, 2)
        holder.rollback()
    assert (
        _row(database_url, task.id)
        == before
        == {
            "status": "enabled",
            "last_outcome_seq": 0,
            "last_status": None,
            "last_error": None,
        }
    )
    shown = client.get_task(task.id)  # the newest outcome, read from the occurrences
    assert (shown.last_outcome_seq, shown.last_status) == (2, "success")
    (listed,) = cli("tasks", "list", "--json").json()
    assert (listed["last_outcome_seq"], listed["last_status"]) == (2, "success")
    assert listed["last_finished_at"] is not None


def test_what_a_task_shows_is_its_newest_outcome_by_sequence_whatever_its_row_says(
    cli, client, database_url
) -> None:
    """Fails on a `tasks show` that reads the row: an older build (or this one's failure
    paths) left it showing an older failure; the newest outcome by sequence is a success, and a
    newer `skipped` firing, which no writer ever showed, changes nothing."""
    task = shell_task(client)
    now = query(database_url, "SELECT now() AS t")[0]["t"]
    for seq, status, reason in ((1, "failed", None), (2, "success", None), (3, "skipped", "x")):
        query(
            database_url,
            """
            INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap,
                status, reason, not_before, finished_at, error)
            VALUES (%s, %s, %s, 'schedule', 'forbid', %s, %s, %s, %s, NULL) RETURNING id
            """,
            (task.id, seq, now + seq * timedelta(minutes=1), status, reason, now, now),
        )
    query(
        database_url,
        "UPDATE task SET occurrence_seq = 3, last_outcome_seq = 1, last_status = 'failed', "
        "last_error = 'exit 1' WHERE id = %s RETURNING id",
        (task.id,),
    )
    shown = cli("tasks", "show", "job", "--json").json()
    assert (shown["last_outcome_seq"], shown["last_status"], shown["last_error"]) == (
        2,
        "success",
        None,
    )
    assert shown["last_scheduled_for"] is not None


def test_a_one_shots_batched_success_still_locks_and_finalizes_its_row(
    client, pool, executors, database_url
) -> None:
    """Fails on a v4 that left every task row alone: the one-shot's row must be locked first
    (the batch waits for a held row and writes nothing) and finalized in the same
    transaction (`completed`, its outcome on the row)."""
    at = query(database_url, "SELECT now() - interval '1 second' AS t")[0]["t"]
    task = client.add_task(
        TaskSpec(name="once", executor="shell", target="true", at=at), now=at - timedelta(minutes=1)
    )
    replica = Replica(database_url, pool, executors, "a")
    assert replica.dispatcher.run_once().queued == 1
    assert replica.launcher.run_once().launched == 1
    replica.finished()
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT 1 FROM task WHERE id = %s FOR UPDATE", (task.id,))
        assert replica.completer.run_once().done == 0  # waited for the row, wrote nothing
        holder.rollback()
    wait_for(lambda: replica.completer.run_once().done == 1, message="the deferred success")
    assert _row(database_url, task.id) == {
        "status": "completed",
        "last_outcome_seq": 1,
        "last_status": "success",
        "last_error": None,
    }
    (occurrence,) = query(database_url, "SELECT status FROM occurrence")
    assert occurrence == {"status": "success"}
