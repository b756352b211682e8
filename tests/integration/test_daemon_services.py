"""The daemon's services in-process against a real database, each race forced into its window."""

import threading
from datetime import timedelta

import psycopg
import pytest

from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.settings import DaemonSettings
from scheduler_daemon.storage.fleet_store import BUDGET_LOCK_KEY
from tests.support import Replica, query, shell_task, snapshot, wait_for

SETTINGS = DaemonSettings(
    instance_prefix="t",
    concurrency=8,
    lease_ttl=timedelta(seconds=3),
    lease_grace=timedelta(seconds=1),
)


def test_a_completion_whose_token_was_raised_is_fenced_and_changes_no_row(
    client, pool, executors, database_url
) -> None:
    # Would fail against a completion that matched the run by id alone (river#1302).
    task = shell_task(client)
    client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 1
    # The race window: between launch and completion a takeover/cancel raises the token.
    query(database_url, "UPDATE occurrence SET lease_token = lease_token + 1 RETURNING id")
    (run,) = replica.finished()
    before = snapshot(database_url)
    assert replica.completer.complete(run) == "fenced"
    assert snapshot(database_url) == before


def test_a_completion_with_its_token_intact_is_recorded_on_run_occurrence_and_task(
    client, pool, executors, database_url
) -> None:
    task = shell_task(client, command="echo hello; exit 0")
    client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    replica.launcher.run_once()
    (run,) = replica.finished()
    assert replica.completer.complete(run) == "recorded"
    (row,) = query(database_url, "SELECT * FROM run")
    assert (row["status"], row["exit_code"], row["output_tail"]) == ("success", 0, "hello\n")
    (occ,) = query(database_url, "SELECT status, attempts FROM occurrence")
    assert occ == {"status": "success", "attempts": 1}
    (t,) = query(database_url, "SELECT last_status, last_outcome_seq FROM task")
    assert t == {"last_status": "success", "last_outcome_seq": 1}
    assert (
        replica.completer.complete(run) == "fenced"
    )  # re-sending the same outcome changes nothing


def test_a_late_completion_of_an_older_occurrence_leaves_the_newer_result(
    client, pool, executors, database_url
) -> None:
    # Forced order: seq 2 completes first, then seq 1 arrives late. Without the
    # last_outcome_seq guard the task row would show occurrence 1.
    task = shell_task(client, overlap="allow", command="exit 0")
    client.trigger(task.id, requested_by="test")
    client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 2
    older, newer = sorted(replica.finished(), key=lambda r: r.occurrence_seq)
    assert replica.completer.complete(newer) == "recorded"
    assert replica.completer.complete(older) == "recorded"
    (t,) = query(database_url, "SELECT last_outcome_seq, last_occurrence_id FROM task")
    assert t == {"last_outcome_seq": 2, "last_occurrence_id": newer.occurrence_id}


def test_a_failed_attempt_with_attempts_left_goes_back_to_the_queue_after_the_backoff(
    client, pool, executors, database_url
) -> None:
    task = shell_task(client, command="exit 3", max_attempts=2, backoff=timedelta(minutes=5))
    client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    replica.launcher.run_once()
    (run,) = replica.finished()
    assert replica.completer.complete(run) == "retry"
    (occ,) = query(
        database_url,
        "SELECT status, attempts, not_before - updated_at AS wait, error FROM occurrence",
    )
    assert occ["status"] == "queued"
    assert occ["attempts"] == 1
    assert timedelta(minutes=4, seconds=59) < occ["wait"] <= timedelta(minutes=5)
    assert occ["error"] == "exit code 3"
    assert replica.launcher.run_once().claimed == 0  # not before the backoff
    query(database_url, "UPDATE occurrence SET not_before = now() RETURNING id")
    replica.launcher.run_once()
    (run,) = replica.finished()
    assert replica.completer.complete(run) == "recorded"
    (t,) = query(database_url, "SELECT last_status, status FROM task")
    assert t == {"last_status": "failed", "status": "enabled"}


def test_two_launchers_racing_for_the_budget_never_exceed_it(
    client, pool, executors, database_url
) -> None:
    # A second connection holds the budget lock while both launchers reach it, so both wait
    # and then count one after the other. A count taken without the lock (or in the same
    # statement that waits for it) would let both claim the full budget.
    client.set_fleet_setting("max-concurrent-runs", "2", updated_by="test")
    task = shell_task(client, overlap="allow", command="sleep 2")
    for _ in range(5):
        client.trigger(task.id, requested_by="test")
    a = Replica(database_url, pool, executors, "a")
    b = Replica(database_url, pool, executors, "b")
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (BUDGET_LOCK_KEY,))
        threads = [threading.Thread(target=r.launcher.run_once) for r in (a, b)]
        for t in threads:
            t.start()
        wait_for(
            lambda: (
                query(
                    database_url,
                    "SELECT count(*) AS n FROM pg_locks WHERE "
                    "locktype = 'advisory' AND NOT granted",
                )[0]["n"]
                == 2
            ),
            message="both launchers to wait for the budget lock",
        )
        holder.commit()
    for t in threads:
        t.join(30)
    (row,) = query(
        database_url,
        "SELECT count(*) AS n FROM occurrence WHERE status IN ('launching', 'running')",
    )
    assert row["n"] == 2
    assert len(a.held) + len(b.held) == 2


def test_a_younger_occurrence_of_a_key_is_not_claimed_while_the_head_is_locked(
    client, pool, executors, database_url
) -> None:
    # SKIP LOCKED alone would skip the locked head and claim the next occurrence of the
    # same key out of order; the "no older active occurrence" predicate prevents it.
    first = shell_task(client, "first", concurrency_key="k")
    second = shell_task(client, "second", concurrency_key="k")
    client.trigger(first.id, requested_by="test")
    client.trigger(second.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT id FROM occurrence WHERE task_id = %s FOR UPDATE", (first.id,))
        assert replica.launcher.run_once().claimed == 0
    result = replica.launcher.run_once()
    assert result.claimed == 1
    (run,) = list(replica.held)
    assert run.task_id == first.id


def test_a_second_active_occurrence_of_a_forbid_task_is_a_database_error(client, db) -> None:
    task = shell_task(client)
    client.trigger(task.id, requested_by="test")
    with pytest.raises(psycopg.errors.UniqueViolation, match="occurrence_forbid_active_key"):
        db.execute(
            "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, "
            "overlap, status, not_before) VALUES (%s, 99, now(), 'manual', 'forbid', "
            "'queued', now())",
            (task.id,),
        )


def test_dispatch_turns_a_due_task_into_one_occurrence_and_advances_it(
    client, pool, executors, database_url
) -> None:
    (db_now,) = query(database_url, "SELECT now() AS t")
    created = db_now["t"] - timedelta(hours=2)
    task = client.add_task(
        TaskSpec(name="job", executor="shell", target="true", every=timedelta(hours=1)), now=created
    )
    replica = Replica(database_url, pool, executors, "a")
    due = created + timedelta(hours=1, seconds=1)  # pinned: one firing, 1 s late
    result = replica.dispatcher.run_once(now=due)
    assert (result.tasks, result.queued) == (1, 1)
    (occ,) = query(
        database_url, "SELECT trigger, status, occurrence_seq, scheduled_for FROM occurrence"
    )
    assert occ == {
        "trigger": "schedule",
        "status": "queued",
        "occurrence_seq": 1,
        "scheduled_for": created + timedelta(hours=1),
    }
    (t,) = query(database_url, "SELECT next_run_at FROM task WHERE id = %s", (task.id,))
    assert t["next_run_at"] == created + timedelta(hours=2)
    assert replica.dispatcher.run_once(now=due).tasks == 0  # nothing due any more


def test_a_renewal_after_a_takeover_stops_the_job_and_writes_nothing(
    client, pool, executors, database_url
) -> None:
    task = shell_task(client, command="sleep 30")
    client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    replica.launcher.run_once()
    (run,) = list(replica.held)
    assert replica.keeper.run_once() == set()  # renewed while the token is ours
    # A peer took the run over (as the reconciler's compare-and-set does) and re-queued it.
    query(
        database_url,
        "UPDATE run SET status = 'interrupted', finished_at = now(), finished_by = 'peer' "
        "RETURNING id",
    )
    before = snapshot(database_url)
    assert replica.keeper.run_once() == {run.run_id}
    outcome = wait_for(run.job.poll, timeout=5, message="the fenced job to stop")
    assert outcome.status == "stopped"
    assert replica.completer.run_once().done == 1  # dropped, not written
    assert snapshot(database_url) == before


def test_an_instance_removed_by_a_peer_registers_again_at_its_next_heartbeat(
    pool, executors, database_url
) -> None:
    replica = Replica(database_url, pool, executors, "frozen-once")
    calls: list[object] = []
    replica.keeper.reregister = calls.append
    replica.keeper.run_once()  # no instance row: as after a peer removed it as dead
    assert calls == [None]


def test_a_long_outage_of_a_per_second_task_writes_a_bounded_number_of_rows(
    client, pool, executors, database_url
) -> None:
    (db_now,) = query(database_url, "SELECT now() AS t")
    created = db_now["t"] - timedelta(days=1)
    client.add_task(
        TaskSpec(name="every-second", executor="shell", target="true", every=timedelta(seconds=1)),
        now=created,
    )
    replica = Replica(database_url, pool, executors, "a")
    result = replica.dispatcher.run_once(now=db_now["t"])
    rows = query(
        database_url,
        "SELECT status, reason, firing_count, scheduled_for, "
        "last_scheduled_for FROM occurrence ORDER BY scheduled_for",
    )
    assert len(rows) <= 102
    assert result.queued == 1  # run_once: the missed firings coalesce into one run
    assert sum(r["firing_count"] for r in rows) == 86_400  # every firing of the day, accounted
    summary = [r for r in rows if r["firing_count"] > 1]
    assert len(summary) == 1
    assert summary[0]["reason"] == "coalesced"
    assert summary[0]["scheduled_for"] == created + timedelta(seconds=1)


def test_an_active_row_cannot_hold_a_null_claim_or_lease_column(client, db) -> None:
    # airflow#66773: `heartbeat < limit` is never true for NULL, so such rows stayed stuck forever.
    task = shell_task(client)
    with pytest.raises(psycopg.errors.CheckViolation, match="occurrence_claim_check"):
        db.execute(
            "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, "
            "overlap, status, not_before) VALUES (%s, 1, now(), 'manual', 'allow', "
            "'launching', now())",
            (task.id,),
        )
    occ = client.trigger(task.id, requested_by="test")
    with pytest.raises(psycopg.errors.NotNullViolation):
        db.execute(
            "INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at, "
            "takeover_at, build_revision) VALUES (%s, 1, 'o', 1, now(), NULL, 'planted')",
            (occ.id,),
        )


def test_cli_transactions_wait_at_most_the_lock_timeout_for_a_task_lock(cli, db, database_url):
    # KNOWN-FAILURES 15: a lock held by a vanished session must not hang the caller forever.
    cli("tasks", "add", "locked", "--every", "1h", "--command", "true")
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT id FROM task FOR UPDATE")
        result = cli("tasks", "trigger", "locked")
        holder.rollback()
    assert result.code == 1
    assert result.err.startswith("error: database error: canceling statement due to lock timeout")
