"""The dispatcher against a real database: due tasks become occurrences once, with time
pinned, also when two dispatchers race for them, and a long outage writes a bounded number of
rows."""

import contextlib
import dataclasses
import threading
from datetime import timedelta

import structlog

from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.services import dispatcher as dispatcher_module
from scheduler_daemon.services.dispatcher import DispatchResult
from scheduler_daemon.storage.database import make_pool
from tests.support import SETTINGS, Replica, query


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


def test_two_dispatchers_whose_due_scans_meet_dispatch_each_firing_once(
    client, database_url, executors, monkeypatch
) -> None:
    """Guarantee 2 raced for real: two dispatchers, each a replica with its own pool (as two
    daemons are), in two threads, over six due tasks of three missed firings each.

    How the window is entered: the dispatcher's due scan (`task_claim_due`, sent with its
    transaction's BEGIN) is wrapped so that each thread, right after its first scan returns and
    with the rows it locked still held, waits on a barrier for the other's scan. So both scan
    the same due set at the same moment, and neither writes anything (occurrences, the task's
    next_run_at) before both have scanned: the check-then-act window of quartz#29. With batches
    of three, each scan locks three tasks and skips the three the other holds (SKIP LOCKED), and
    both then dispatch at once.

    What it catches, each tried by hand against this test (not committed):
    - the scan without `FOR UPDATE SKIP LOCKED` (a plain read): both scans read the same tasks
      and both dispatch every one. The unique key (`occurrence_task_scheduled_for_key`, which
      `occurrence_dispatch`'s ON CONFLICT names) still leaves one occurrence per firing, but
      the test fails: each dispatcher dispatched 6 tasks, not 3;
    - that, and the unique key dropped too (the index, and the ON CONFLICT clause): two
      occurrences of every firing, and the first assertion fails;
    - the key dropped alone: the test passes. The row lock keeps each task to one dispatcher;
      the key is the backstop behind it, which only a broken lock reaches;
    - `FOR UPDATE` without SKIP LOCKED: the second scan waits for the first's locks, so the
      window never opens; it gives up at its lock timeout (5 s, LockNotAvailable) and the
      barrier breaks: errors escape, and the test fails.
    """
    (db_now,) = query(database_url, "SELECT now() AS t")
    now = db_now["t"]
    for i in range(6):
        client.add_task(
            TaskSpec(
                name=f"job-{i}",
                executor="shell",
                target="true",
                every=timedelta(hours=1),
                misfire="run_all",
                overlap="allow",
            ),
            now=now - timedelta(hours=3, minutes=30),
        )
    barrier = threading.Barrier(2, timeout=10)
    scanned = threading.local()  # per thread: only its first scan waits
    real = dispatcher_module.transaction

    @contextlib.contextmanager
    def scans_meet(pool, *args, first=None, **kw):
        with real(pool, *args, first=first, **kw) as tx:
            if first and first[0] == "task_claim_due" and not getattr(scanned, "once", False):
                scanned.once = True
                barrier.wait()  # its rows locked, before any write: the other has scanned too
            yield tx

    monkeypatch.setattr(dispatcher_module, "transaction", scans_meet)
    settings = dataclasses.replace(SETTINGS, dispatch_batch=3)
    results: dict[str, DispatchResult] = {}
    errors: list[BaseException] = []

    def dispatch(name: str) -> None:
        pool = make_pool(database_url, max_size=2, name=f"dispatcher {name}")
        pool.open(wait=True)
        try:
            replica = Replica(database_url, pool, executors, name, settings=settings)
            results[name] = replica.dispatcher.run_once(now=now)
        except BaseException as exc:
            errors.append(exc)
        finally:
            pool.close()

    threads = [threading.Thread(target=dispatch, args=(name,)) for name in ("a", "b")]
    with structlog.testing.capture_logs() as logs:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert errors == []
    rows = query(
        database_url,
        "SELECT task_id, scheduled_for, count(*) AS n FROM occurrence "
        "GROUP BY task_id, scheduled_for",
    )
    assert len(rows) == 6 * 3
    assert {r["n"] for r in rows} == {1}  # one occurrence per (task, scheduled_for)
    assert sorted(r.tasks for r in results.values()) == [3, 3]  # each task by one dispatcher
    assert sum(r.queued for r in results.values()) == 6 * 3
    seqs = query(
        database_url,
        "SELECT t.occurrence_seq, count(o.id) AS n FROM task t "
        "JOIN occurrence o ON o.task_id = t.id GROUP BY t.id",
    )
    assert all(s["occurrence_seq"] == s["n"] == 3 for s in seqs)  # moved on once each
    assert [e for e in logs if e["event"] == "firing_already_recorded"] == []
