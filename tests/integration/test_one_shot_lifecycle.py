"""A one-shot task's status follows its newest firing (by sequence, never by time; a manual
trigger never decides it, whether it ran, failed, was cancelled or expired, though it is shown
in `last_*` when it is the newest outcome), through the real completer, `runs cancel` and
reconciler (issue 31)."""

from datetime import timedelta
from typing import Any

import pytest

from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.services.reconciler import Reconciler
from tests.support import Replica, query


def _one_shot(client, database_url, command: str, **kw):
    """A one-shot task whose instant passed ten seconds ago (created twenty seconds ago)."""
    (now,) = query(database_url, "SELECT now() AS t")
    return client.add_task(
        TaskSpec(
            name="once",
            executor="shell",
            target=command,
            at=now["t"] - timedelta(seconds=10),
            **kw,
        ),
        now=now["t"] - timedelta(seconds=20),
    )


def _fired_one_shot(client: Any, database_url: str, *, seq: int) -> Any:
    """A one-shot of `true` (`_one_shot`) whose firing is in hand: status running, no next
    run, `seq` occurrences numbered (the test writes them)."""
    task = _one_shot(client, database_url, "true")
    query(
        database_url,
        "UPDATE task SET status = 'running', next_run_at = NULL, occurrence_seq = %s WHERE id = %s",
        (seq, task.id),
    )
    return task


def _reconciler(pool, max_interruptions: int = 3) -> Reconciler:
    return Reconciler(
        pool,
        instance_id="r",
        restart_quiet=timedelta(0),
        max_interruptions=max_interruptions,
        dead_after=timedelta(minutes=10),
    )


def _status(client, task) -> str:
    return client.get_task(task.id).status


OUTCOMES = {
    "success": ("true", {}, "completed"),
    "failed": ("exit 3", {}, "failed"),
    "timeout": ("sleep 5", {"timeout": timedelta(seconds=0.5)}, "failed"),
}


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_each_outcome_of_a_one_shot_sets_its_status_through_the_completer(
    client, pool, executors, database_url, outcome
) -> None:
    command, kw, expected = OUTCOMES[outcome]
    task = _one_shot(client, database_url, command, **kw)
    replica = Replica(database_url, pool, executors, "a")
    assert replica.dispatcher.run_once().queued == 1
    assert _status(client, task) == "running"
    assert replica.launcher.run_once().launched == 1
    replica.finished()
    replica.completer.run_once()
    assert _status(client, task) == expected


def test_a_cancelled_or_interrupted_one_shot_ends_cancelled(
    client, pool, executors, database_url
) -> None:
    task = _one_shot(client, database_url, "sleep 30")
    replica = Replica(database_url, pool, executors, "a")
    replica.dispatcher.run_once()
    replica.launcher.run_once()
    (run,) = list(replica.held)
    query(
        database_url,
        "UPDATE run SET takeover_at = now() - interval '1 s', "
        "lease_expires_at = now() - interval '2 s' RETURNING id",
    )
    _reconciler(pool, max_interruptions=0).run_once()  # taken over, interruption bound reached
    assert _status(client, task) == "cancelled"
    run.job.stop("test over")


def test_an_older_occurrence_never_decides_a_one_shot_whose_newer_one_is_active(
    client, pool, executors, database_url
) -> None:
    # Would fail against task_record_outcome that only checked "newer than the last recorded
    # outcome": the manual trigger (seq 1) finishing first set the task `completed` while the
    # scheduled firing (seq 2) still ran, and seq 2's failure then landed on a completed task.
    task = _one_shot(client, database_url, "exit 0", overlap="allow")
    manual = client.trigger(task.id, requested_by="test")  # seq 1, before the firing
    replica = Replica(database_url, pool, executors, "a")
    replica.launcher.run_once()  # seq 1 running
    query(
        database_url,
        'UPDATE task SET payload = \'{"command": "exit 4"}\' WHERE id = %s',
        (task.id,),
    )  # the scheduled firing will fail
    assert replica.dispatcher.run_once().queued == 1  # seq 2
    replica.launcher.run_once()
    runs = replica.finished()
    first = next(r for r in runs if r.occurrence_id == manual.id)
    assert replica.completer.complete(first) == "recorded"
    assert _status(client, task) == "running"  # seq 2 is still running: it decides
    replica.completer.run_once()
    assert _status(client, task) == "failed"
    assert client.get_task(task.id).last_outcome_seq == 2


def test_a_manual_trigger_skipped_for_overlap_does_not_decide_the_one_shot(
    client, pool, executors, database_url
) -> None:
    task = _one_shot(client, database_url, "sleep 1")  # forbid
    replica = Replica(database_url, pool, executors, "a")
    replica.dispatcher.run_once()
    replica.launcher.run_once()
    skipped = client.trigger(task.id, requested_by="test")
    assert (skipped.status, skipped.occurrence_seq) == ("skipped", 2)
    replica.finished()
    replica.completer.run_once()  # the older, real firing succeeds; the newer one never ran
    assert _status(client, task) == "completed"
    _reconciler(pool).run_once()
    assert _status(client, task) == "completed"


@pytest.mark.parametrize("order", ["reversed", "equal"])
def test_the_finalizer_picks_the_newest_occurrence_by_sequence_not_by_time(
    client, pool, database_url, order
) -> None:
    task = _fired_one_shot(client, database_url, seq=2)
    later = "now()" if order == "equal" else "now() + interval '1 hour'"
    query(
        database_url,
        "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, "
        "status, not_before, created_at, finished_at) VALUES "
        f"(%(t)s, 1, {later}, 'schedule', 'forbid', 'success', now(), {later}, {later}), "
        "(%(t)s, 2, now(), 'backfill', 'forbid', 'failed', now(), now(), now()), "
        "(%(t)s, 3, now(), 'manual', 'forbid', 'success', now(), now(), now())",
        {"t": task.id},
    )
    _reconciler(pool).run_once()
    # seq 2's outcome, although seq 1 looks newer, and seq 3 is a manual trigger.
    assert _status(client, task) == "failed"


def test_the_finalizer_leaves_a_one_shot_whose_newest_occurrence_became_active_meanwhile(
    client, pool, database_url
) -> None:
    # Forced: the scan sees a one-shot with no active occurrence; before the fix takes the task
    # lock, a manual trigger queues one. The fix must read the newest after the lock.
    task = _fired_one_shot(client, database_url, seq=1)
    query(
        database_url,
        "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, "
        "status, not_before, finished_at) "
        "VALUES (%s, 1, now(), 'schedule', 'forbid', 'failed', now(), now())",
        (task.id,),
    )
    reconciler = _reconciler(pool)
    (candidate,) = list(reconciler._candidates(reconciler._one_shots_page))
    query(  # the newest firing, a backfill, is now queued
        database_url,
        "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, "
        "status, not_before) VALUES (%s, 2, now(), 'backfill', 'forbid', 'queued', now())",
        (task.id,),
    )
    assert reconciler._finalize(candidate) is None
    assert _status(client, task) == "running"


def test_the_finalizer_is_not_held_by_an_active_manual_trigger(client, pool, database_url):
    # Would fail on the parent commit: a queued manual occurrence kept the task `running`
    # although its firing had ended, until the manual run ended and then decided it.
    task = _fired_one_shot(client, database_url, seq=2)
    query(
        database_url,
        "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, "
        "status, not_before, finished_at) VALUES "
        "(%(t)s, 1, now(), 'schedule', 'allow', 'failed', now(), now()), "
        "(%(t)s, 2, now(), 'manual', 'allow', 'queued', now(), NULL)",
        {"t": task.id},
    )
    _reconciler(pool).run_once()
    assert _status(client, task) == "failed"


def _working_firing(client, pool, executors, database_url, overlap: str, **kw):
    """A one-shot's scheduled firing launched (its run working, as the replica holds it) and a
    manual trigger of it recorded after (seq 2)."""
    task = _one_shot(client, database_url, "exit 4", overlap=overlap, **kw)
    replica = Replica(database_url, pool, executors, "a")
    assert replica.dispatcher.run_once().queued == 1
    assert replica.launcher.run_once().launched == 1
    manual = client.trigger(task.id, requested_by="test")
    assert manual.occurrence_seq == 2
    return task, replica, manual


def test_a_cancelled_queued_manual_trigger_does_not_decide_the_one_shot(
    client, pool, executors, database_url
) -> None:
    # Issue 31's window 3. Fails on the parent commit: the cancel of the queued manual
    # occurrence (the newest) ended the task `cancelled` while its firing still worked, and the
    # firing's outcome then never decided it.
    task, replica, manual = _working_firing(client, pool, executors, database_url, "queue")
    assert manual.status == "queued"
    client.cancel(manual.id, occurrence=True, requested_by="test")
    assert _status(client, task) == "running"
    assert client.get_task(task.id).last_status == "cancelled"  # the newest outcome is shown
    replica.finished()
    replica.completer.run_once()
    assert _status(client, task) == "failed"  # its firing's outcome
    assert client.get_task(task.id).last_outcome_seq == 2  # an older one never overwrites


def test_an_expired_manual_trigger_does_not_decide_the_one_shot(
    client, pool, executors, database_url
) -> None:
    # Fails on the parent commit: the reconciler's expiry of the queued manual occurrence (past
    # its start deadline) ended the task `cancelled` while its firing still worked.
    task, replica, manual = _working_firing(
        client, pool, executors, database_url, "queue", start_deadline=timedelta(seconds=1)
    )
    query(
        database_url,
        "UPDATE occurrence SET scheduled_for = now() - interval '1 minute' WHERE id = %s",
        (manual.id,),
    )
    assert manual.id in _reconciler(pool).run_once().ids["expired"]
    assert _status(client, task) == "running"
    replica.finished()
    replica.completer.run_once()
    assert _status(client, task) == "failed"


@pytest.mark.parametrize("write", ["unit", "batch"])
def test_a_manual_run_finishing_first_does_not_decide_the_one_shot(
    client, pool, executors, database_url, write
) -> None:
    # Fails on the parent commit: under `allow` the manual run (seq 2, a success) finished
    # while the firing still worked and set the task `completed`; the firing's failure, older,
    # then changed nothing. `unit`: written alone (sd_show_outcomes_v1 through
    # task_record_outcome_many); `batch`: the batched success (sd_succeed_runs_v4).
    task, replica, manual = _working_firing(client, pool, executors, database_url, "allow")
    query(  # the manual run succeeds
        database_url,
        'UPDATE task SET payload = \'{"command": "true"}\' WHERE id = %s',
        (task.id,),
    )
    assert replica.launcher.run_once().launched == 1
    runs = replica.finished()
    firing, manual_run = sorted(runs, key=lambda r: r.occurrence_id)
    assert manual_run.occurrence_id == manual.id
    if write == "unit":
        assert replica.completer.complete(manual_run) == "recorded"
    else:
        firing.retry_at = float("inf")  # held back: this pass writes the manual success only
        assert replica.completer.run_once().done == 1
        firing.retry_at = 0.0
    shown = client.get_task(task.id)
    assert (shown.status, shown.last_status) == ("running", "success")
    replica.completer.run_once()
    assert _status(client, task) == "failed"
