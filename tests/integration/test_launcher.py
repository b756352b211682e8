"""The launcher against a real database: the fleet budget and per-key order hold when
launchers race (each race forced with a held lock)."""

import threading

import psycopg

from scheduler_daemon.storage.fleet_store import BUDGET_LOCK_KEY
from tests.support import Replica, query, shell_task, wait_for


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
