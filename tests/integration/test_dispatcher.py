"""The dispatcher against a real database: due tasks become occurrences once, with time
pinned, and a long outage writes a bounded number of rows."""

from datetime import timedelta

from scheduler_daemon.domain.task import TaskSpec
from tests.support import Replica, query


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
