"""Run history (storage/history.py, `runs list`) against a real database: which rows a history
shows for each state an occurrence can be in, and how it pages."""

from datetime import timedelta
from typing import Any

from scheduler_daemon.services.reconciler import Reconciler
from tests.support import Replica, query, shell_task


def _reconciler(pool: Any) -> Reconciler:
    return Reconciler(
        pool,
        instance_id="rec",
        restart_quiet=timedelta(0),
        max_interruptions=3,
        dead_after=timedelta(minutes=10),
    )


def test_an_occurrence_requeued_after_a_failed_run_is_listed_as_queued(
    client, pool, executors, database_url
) -> None:
    # Before the fix the history had one row per run plus one per occurrence *that never ran*,
    # so an occurrence waiting for its retry showed only its failed run, and `--status queued`
    # missed it.
    task = shell_task(client, command="exit 3", max_attempts=2, backoff=timedelta(minutes=5))
    occurrence = client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    replica.launcher.run_once()
    (run,) = replica.finished()
    assert replica.completer.complete(run) == "retry"
    queued = client.list_runs(status="queued")
    assert [(r["occurrence_id"], r["id"], r["status"]) for r in queued] == [
        (occurrence["id"], None, "queued")
    ]
    # The whole history: the waiting attempt above its failed run, each shown once.
    rows = client.list_runs(task=task.id)
    assert [(r["id"], r["status"]) for r in rows] == [(None, "queued"), (run.run_id, "failed")]


def test_an_occurrence_requeued_by_a_takeover_is_listed_as_queued(
    client, pool, executors, database_url
) -> None:
    task = shell_task(client, command="sleep 30")
    occurrence = client.trigger(task.id, requested_by="test")
    owner = Replica(database_url, pool, executors, "owner")
    owner.launcher.run_once()
    (held,) = list(owner.held)
    query(
        database_url,
        "UPDATE run SET lease_expires_at = now() - interval '10 seconds', "
        "takeover_at = now() - interval '5 seconds' WHERE status = 'running' RETURNING id",
    )
    assert _reconciler(pool).run_once().ids["taken_over"] == [held.run_id]
    held.job.stop("test")
    queued = client.list_runs(status="queued")
    assert [(r["occurrence_id"], r["id"]) for r in queued] == [(occurrence["id"], None)]
    assert [r["status"] for r in client.list_runs(task=task.id)] == ["queued", "interrupted"]


def test_a_finished_occurrence_shows_only_its_runs_and_a_running_one_only_its_run(
    client, pool, executors, database_url
) -> None:
    task = shell_task(client, command="exit 0", overlap="allow")
    client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    replica.launcher.run_once()
    (run,) = replica.finished()
    assert [(r["id"], r["status"]) for r in client.list_runs(task=task.id)] == [
        (run.run_id, "running")
    ]
    assert replica.completer.complete(run) == "recorded"
    assert [(r["id"], r["status"]) for r in client.list_runs(task=task.id)] == [
        (run.run_id, "success")
    ]
