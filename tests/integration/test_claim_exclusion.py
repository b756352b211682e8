"""Claim-time exclusion: one executing occurrence per concurrency key and per `queue` task,
whatever order occurrences commit in, and FIFO among the waiting. Each race is forced."""

from datetime import timedelta

import psycopg
import pytest

from tests.support import Replica, query, shell_task


def _keyed(client, name: str, command: str = "sleep 1", **kw):
    return shell_task(client, name, command, concurrency_key="k", overlap="allow", **kw)


def test_a_late_committing_older_keyed_occurrence_waits_for_the_running_one(
    client, pool, executors, database_url
) -> None:
    # Would fail against the claim that only asked "is an OLDER occurrence of my key active?"
    # (KNOWN-FAILURES 26): the older one that commits late passes that test while a younger
    # one of its key runs. The window is forced: the younger one is running before the older
    # one (scheduled_for a minute earlier, as a slow dispatcher or a catch-up writes it)
    # becomes visible.
    younger_task, older_task, later_task = (_keyed(client, n) for n in ("y", "x", "z"))
    younger = client.trigger(younger_task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 1
    older = client.trigger(
        older_task.id, requested_by="test", now=younger.scheduled_for - timedelta(minutes=1)
    )
    later = client.trigger(later_task.id, requested_by="test")

    assert replica.launcher.run_once().claimed == 0  # the key is executing: nobody else starts
    # The database enforces it too: a second executing occurrence of the key is an error.
    with pytest.raises(psycopg.errors.UniqueViolation):
        query(database_url, "UPDATE occurrence SET status = 'running' WHERE id = %s", (older.id,))

    (run,) = replica.finished()
    assert replica.completer.complete(run) == "recorded"
    # Among the waiting, firing order: the late older one goes before the younger queued one.
    result = replica.launcher.run_once()
    assert result.claimed == 1
    (running,) = query(database_url, "SELECT id FROM occurrence WHERE status = 'running'")
    assert running["id"] == older.id
    assert query(database_url, "SELECT status FROM occurrence WHERE id = %s", (later.id,)) == [
        {"status": "queued"}
    ]


def test_a_keyed_head_locked_by_someone_else_is_not_overtaken(
    client, pool, executors, database_url
) -> None:
    # SKIP LOCKED alone would skip the locked head and claim the next one of its key
    # (KNOWN-FAILURES 18). Forced: a second connection holds the head's row lock.
    head = client.trigger(_keyed(client, "a").id, requested_by="test")
    client.trigger(_keyed(client, "b").id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT 1 FROM occurrence WHERE id = %s FOR UPDATE", (head.id,))
        assert replica.launcher.run_once().claimed == 0
    assert replica.launcher.run_once().claimed == 1
    (running,) = query(database_url, "SELECT id FROM occurrence WHERE status = 'running'")
    assert running["id"] == head.id
    replica.finished()


def test_a_queue_task_runs_its_occurrences_one_at_a_time_in_sequence_order(
    client, pool, executors, database_url
) -> None:
    # FIFO of a `queue` task at claim time, with its head row locked by a second connection
    # (the claim must not skip to the second occurrence) and then executing.
    task = shell_task(client, "q", "sleep 1", overlap="queue")
    first = client.trigger(task.id, requested_by="test")
    second = client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT 1 FROM occurrence WHERE id = %s FOR UPDATE", (first.id,))
        assert replica.launcher.run_once().claimed == 0
    assert replica.launcher.run_once().claimed == 1  # the first; the second waits for it
    assert replica.launcher.run_once().claimed == 0
    (run,) = replica.finished()
    assert run.occurrence_id == first.id
    replica.completer.complete(run)
    assert replica.launcher.run_once().claimed == 1
    (run,) = replica.finished()
    assert run.occurrence_id == second.id
    third = client.trigger(task.id, requested_by="test")
    with pytest.raises(psycopg.errors.UniqueViolation):  # one executing per queue task, enforced
        query(database_url, "UPDATE occurrence SET status = 'running' WHERE id = %s", (third.id,))


def test_a_manual_trigger_on_a_paused_task_runs_and_the_task_stays_paused(
    client, pool, executors, database_url
) -> None:
    task = shell_task(client, "p", "true")
    client.pause(task.id)
    occurrence = client.trigger(task.id, requested_by="test")
    assert occurrence.status == "queued"
    replica = Replica(database_url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 1
    (run,) = replica.finished()
    assert replica.completer.complete(run) == "recorded"
    assert client.get_task(task.id).spec.paused
    assert replica.dispatcher.run_once(now=task.next_run_at + timedelta(hours=5)).queued == 0
