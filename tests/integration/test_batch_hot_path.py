"""The batched hot path: one transaction writes a batch of outcomes, and it still says per row
whether it was fenced (a lost race on one row is that row's return value; the others are
written)."""

import dataclasses
import threading
import time
from datetime import timedelta

import psycopg
import pytest

from scheduler_daemon.storage import occurrence_store
from scheduler_daemon.storage.database import Limits
from scheduler_daemon.storage.fleet_store import BUDGET_LOCK_KEY
from tests.support import (
    SETTINGS,
    Replica,
    finished_in_sequence,
    launched_shell_runs,
    query,
    shell_task,
    wait_for,
)

TTL, GRACE = timedelta(seconds=30), timedelta(seconds=5)


def _rows(url: str, occurrence_id: int) -> dict[str, list[dict]]:
    return {
        "occurrence": query(url, "SELECT * FROM occurrence WHERE id = %s", (occurrence_id,)),
        "run": query(url, "SELECT * FROM run WHERE occurrence_id = %s", (occurrence_id,)),
    }


def test_a_batch_completion_fences_the_run_whose_token_moved_on_and_writes_the_others(
    client, pool, executors, database_url
):
    # Would fail against a batch that wrote by id alone (river#1302: the moved-on occurrence
    # would be finished) or that rolled the whole batch back for one fenced row.
    _task, replica = launched_shell_runs(client, pool, executors, database_url, 3)
    runs = replica.finished()
    moved = runs[1]
    query(
        database_url,
        "UPDATE occurrence SET lease_token = lease_token + 1 WHERE id = %s RETURNING id",
        (moved.occurrence_id,),
    )
    before = _rows(database_url, moved.occurrence_id)
    result = replica.completer.run_once()
    assert (result.done, result.fenced, len(result.finished)) == (3, 1, 2)
    assert _rows(database_url, moved.occurrence_id) == before
    rows = query(database_url, "SELECT id, status FROM occurrence ORDER BY id")
    assert [r["status"] for r in rows if r["id"] != moved.occurrence_id] == ["success", "success"]
    assert len(replica.held) == 0


def test_a_batch_completion_leaves_the_occurrence_of_a_run_row_it_could_not_write(
    client, pool, executors, database_url
):
    # Would fail against a batch that settled every occurrence it had locked, whether or not
    # its run row was written: the occurrence would be finished beside a run still `running`.
    _task, replica = launched_shell_runs(client, pool, executors, database_url, 2)
    first, second = replica.finished()
    query(
        database_url,
        "UPDATE run SET owner = 'someone-else' WHERE id = %s RETURNING id",
        (first.run_id,),
    )
    result = replica.completer.run_once()
    assert (result.done, result.fenced) == (2, 1)
    (occ,) = query(
        database_url, "SELECT status FROM occurrence WHERE id = %s", (first.occurrence_id,)
    )
    assert occ == {"status": "running"}
    (run,) = query(database_url, "SELECT status FROM run WHERE id = %s", (second.run_id,))
    assert run == {"status": "success"}


def test_a_batch_with_two_outcomes_of_one_task_shows_the_newer_one(
    client, pool, executors, database_url
):
    # Would fail against a multi-row task update fed both rows of the task: PostgreSQL applies
    # one of them, whichever the join meets first, so the task could show the older outcome;
    # since revision 0021 the newest outcome is read from the occurrences, by sequence.
    task, replica = launched_shell_runs(client, pool, executors, database_url, 2)
    _older, newer = finished_in_sequence(replica, database_url)
    assert replica.completer.run_once().done == 2
    shown = client.get_task(task.id)
    (scheduled_for,) = query(
        database_url, "SELECT scheduled_for FROM occurrence WHERE id = %s", (newer.occurrence_id,)
    )
    assert (shown.last_outcome_seq, shown.last_scheduled_for) == (2, scheduled_for["scheduled_for"])


def test_a_batch_mixing_a_retry_and_a_final_outcome_writes_each(
    client, pool, executors, database_url
):
    retrying = shell_task(client, "retrying", command="exit 3", max_attempts=2)
    done = shell_task(client, "done", command="exit 0")
    for task in (retrying, done):
        client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 2
    replica.finished()
    result = replica.completer.run_once()
    assert (result.done, result.fenced) == (2, 0)
    rows = query(
        database_url,
        "SELECT t.name, o.status, o.attempts FROM occurrence o JOIN task t ON t.id = o.task_id "
        "ORDER BY t.name",
    )
    assert rows == [
        {"name": "done", "status": "success", "attempts": 1},
        {"name": "retrying", "status": "queued", "attempts": 1},
    ]
    runs = query(database_url, "SELECT status FROM run ORDER BY id")
    assert [r["status"] for r in runs] == ["failed", "success"]


def _two_slot_replica(client, pool, executors, database_url, triggers: int) -> Replica:
    """A replica with two slots, both running shell jobs that have finished, and `triggers`
    - 2 occurrences still queued behind them."""
    task = shell_task(client, overlap="allow")
    for _ in range(triggers):
        client.trigger(task.id, requested_by="test")
    replica = Replica(
        database_url, pool, executors, "a", settings=dataclasses.replace(SETTINGS, concurrency=2)
    )
    assert replica.launcher.run_once().launched == 2
    replica.finished()
    return replica


def test_the_successes_and_the_claim_for_their_slots_commit_in_one_transaction(
    client, pool, executors, database_url
):
    # Would fail against a pass that wrote the successes and claimed in two transactions: the
    # runs it finished and the runs it started would carry two transaction ids.
    replica = _two_slot_replica(client, pool, executors, database_url, triggers=4)
    result = replica.services.write_and_refill()
    assert (result.completed.done, result.freed, result.launched.launched) == (2, 2, 2)
    runs = query(database_url, "SELECT status, xmin::text AS xid FROM run ORDER BY id")
    assert [r["status"] for r in runs] == ["success", "success", "running", "running"]
    assert len({r["xid"] for r in runs}) == 1
    assert len(replica.held) == 2


def test_the_claim_sent_with_successes_counts_their_slots_free_in_the_fleet_budget(
    client, pool, executors, database_url
):
    # The budget is full with the two runs finishing. Would fail against a claim that counted
    # the executing occurrences before the successes were written (or in another snapshot):
    # it would find no free budget and claim nothing.
    client.set_fleet_setting("max-concurrent-runs", "2", updated_by="test")
    replica = _two_slot_replica(client, pool, executors, database_url, triggers=3)
    result = replica.services.write_and_refill()
    assert result.launched.launched == 1
    (row,) = query(
        database_url,
        "SELECT count(*) AS n FROM occurrence WHERE status IN ('launching', 'running')",
    )
    assert row["n"] == 1


def test_the_claim_sent_with_successes_waits_for_the_budget_lock_as_long_as_a_claim_alone(
    client, pool, executors, database_url
):
    # A second connection holds the budget's lock until the combined transaction has waited
    # for it well past the successes' 100 ms first-try lock wait. Would fail against a claim
    # sent under the successes' limits: it would give up at 100 ms, and take the successes
    # back with it (nothing launched).
    replica = _two_slot_replica(client, pool, executors, database_url, triggers=4)
    results = []
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (BUDGET_LOCK_KEY,))
        writer = threading.Thread(
            target=lambda: results.append(replica.services.write_and_refill())
        )
        writer.start()
        wait_for(
            lambda: (
                query(
                    database_url,
                    "SELECT count(*) AS n FROM pg_locks "
                    "WHERE locktype = 'advisory' AND NOT granted",
                )[0]["n"]
                == 1
            ),
            message="the combined transaction to wait for the budget lock",
        )
        time.sleep(0.5)  # five times the successes' first-try lock wait
        holder.commit()
    writer.join(30)
    (result,) = results
    assert result.launched.launched == 2
    runs = query(database_url, "SELECT status FROM run ORDER BY id")
    assert [r["status"] for r in runs] == ["success", "success", "running", "running"]


def test_a_claim_that_cannot_lock_the_budget_takes_its_successes_back_to_be_written_alone(
    client, pool, executors, database_url, monkeypatch
):
    # The budget's lock is held past the claim's wait (shortened here to 200 ms so the test
    # does not wait 5 s). Nothing of the combined transaction may commit, and the successes
    # must still be written, in a transaction without the claim. Would fail against successes
    # committed apart from the claim (the second write would find them fenced) or dropped
    # with it.
    monkeypatch.setattr(occurrence_store, "Limits", lambda: Limits(lock_timeout="200ms"))
    replica = _two_slot_replica(client, pool, executors, database_url, triggers=4)
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (BUDGET_LOCK_KEY,))
        result = replica.services.write_and_refill()
    assert result.launched is None
    assert (result.completed.done, result.completed.fenced) == (2, 0)
    runs = query(database_url, "SELECT status FROM run ORDER BY id")
    assert [r["status"] for r in runs] == ["success", "success"]
    queued = query(database_url, "SELECT count(*) AS n FROM occurrence WHERE status = 'queued'")
    assert queued == [{"n": 2}]
    assert replica.launcher.run_once().launched == 2


def test_the_jobs_claimed_with_the_successes_start_even_when_a_later_write_of_the_pass_fails(
    client, pool, executors, database_url, monkeypatch
):
    # The pass also has a failed job's outcome to write after the successes and their claim
    # committed, and that write fails (injected: an error that is no lock wait, so it ends the
    # pass). Would fail against a loop that launched the claim only once run_once returned:
    # its runs would be committed as running with no job, until their leases ran out.
    ok = shell_task(client, "ok", overlap="allow")
    failing = shell_task(client, "failing", command="exit 3", overlap="allow")
    for task in (ok, ok, failing, ok, ok):
        client.trigger(task.id, requested_by="test")
    replica = Replica(
        database_url, pool, executors, "a", settings=dataclasses.replace(SETTINGS, concurrency=3)
    )
    assert replica.launcher.run_once().launched == 3
    replica.finished()

    def refuse(*_args, **_kwargs):
        raise psycopg.errors.InternalError("injected: the failed outcome's write fails")

    monkeypatch.setattr(replica.completer, "_attempt", refuse)
    with pytest.raises(psycopg.errors.InternalError):
        replica.services.write_and_refill()
    # The failed job's run (its outcome not written) and the two claimed with the successes.
    running = query(database_url, "SELECT id FROM run WHERE status = 'running' ORDER BY id")
    assert [run.run_id for run in sorted(replica.held, key=lambda r: r.run_id)] == [
        r["id"] for r in running
    ]
    assert len(running) == 3
    assert all(run.job is not None for run in replica.held)
