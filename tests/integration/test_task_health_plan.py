"""EXPLAIN guard for `tasks health` (revision 0024): one task's window is one index-only range
of occurrence_task_window_idx and at most 500 firings' runs; the fleet's lost rows of the window
are one range of occurrence_lost_idx, and every task's verdict reads a few index entries more
(its active rows, its newest attempts: the join stops at the N-th run), never a scan of
occurrence or run.

Seeding 10,000 tasks and 1,000,000 occurrences takes minutes on a shared machine
(bench/health.py), so the guard seeds 1,000 tasks and 100,000 occurrences (20,000 of them one
per-second task's day), ANALYZEs them, then tells the planner the tables are 10 times larger
(`pg_class.reltuples`, as tests/integration/test_task_list_plan.py does).
"""

import re
from datetime import timedelta

import psycopg
import pytest

from scheduler_daemon.domain import health
from scheduler_daemon.storage import query as queries
from tests.support import query

TASKS, PER_SECOND, PER_TASK, SCALE = 1_000, 20_000, 80, 10
DAY = timedelta(hours=24)

# health_signals' parameters but the batch's (`after`, `batch`): every task, the day's window.
SIGNALS = {
    "now": None,
    "window": DAY,
    "id": None,
    "attempts": health.FAILING_ATTEMPTS,
    "scan": health.ATTEMPT_SCAN,
}


# The newest outcome's read, on the default partition (the only one here: issue 47).
OUTCOME_SCAN = r"occurrence_active_task_outcome_idx on occurrence_active(?: \w+)?"


@pytest.fixture
def fleet(database_url: str) -> str:
    for table in ("task", "occurrence_active", "run_active"):  # a partitioned table has none
        query(database_url, f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    query(
        database_url,
        """
        INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload,
                          next_run_at, occurrence_seq)
        SELECT 'task-' || lpad(g::text, 5, '0'), 'interval',
               CASE WHEN g = 1 THEN interval '1 second' ELSE interval '15 minutes' END,
               now() - interval '2 days', 'shell', '{"command": "true"}',
               now() + interval '1 hour', %(per)s
        FROM generate_series(1, %(n)s) g RETURNING 1""",
        {"n": TASKS, "per": PER_SECOND},
    )
    query(
        database_url,
        """
        INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap,
                                status, reason, not_before, finished_at)
        SELECT t, k, s, 'schedule', 'forbid', st,
               CASE st WHEN 'skipped' THEN 'overlap' WHEN 'expired' THEN 'start_deadline' END,
               s, s + interval '1 second'
        FROM (SELECT t, k, s, CASE WHEN t %% 3 = 0 AND k > %(per)s - 4 THEN 'failed'
                                   WHEN k %% 97 = 0 THEN 'skipped'
                                   WHEN k %% 501 = 0 THEN 'expired'
                                   WHEN k %% 7 = 0 THEN 'failed' ELSE 'success' END AS st
              FROM (SELECT 1 AS t, k, now() - (%(sec)s + 1 - k) * interval '1 second' AS s
                    FROM generate_series(1, %(sec)s) k
                    UNION ALL
                    SELECT t, k, now() - (%(per)s + 1 - k) * interval '15 minutes'
                    FROM generate_series(2, %(n)s) t, generate_series(1, %(per)s) k) f) x
        RETURNING 1""",
        {"n": TASKS, "sec": PER_SECOND, "per": PER_TASK},
    )
    query(
        database_url,
        """
        INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at,
                         takeover_at, status, started_at, finished_at, build_revision)
        SELECT id, 1, 'x', 1, finished_at, finished_at, status, scheduled_for, finished_at, 'x'
        FROM occurrence WHERE status IN ('success', 'failed') RETURNING 1""",
    )
    for table in ("task", "occurrence", "run"):
        query(database_url, f"VACUUM ANALYZE {table}")
    query(  # the tables and their indexes, as the planner sees them, 10 times larger (of a
        # partitioned table, its partitions': the default ones here, issue 47)
        database_url,
        """
        UPDATE pg_class c SET reltuples = c.reltuples * %(scale)s
        WHERE c.oid IN ('task'::regclass, 'occurrence_active'::regclass, 'run_active'::regclass)
           OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid IN
                        ('task'::regclass, 'occurrence_active'::regclass,
                         'run_active'::regclass))
        RETURNING c.oid""",
        {"scale": SCALE},
    )
    return database_url


def _explain(url: str, name: str, params: dict) -> str:
    with psycopg.connect(url, prepare_threshold=None) as conn:  # as the Client sends it
        options = "(ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)"
        rows = conn.execute(f"EXPLAIN {options} {queries.QUERIES[name].sql}", params)
        return "\n".join(r[0] for r in rows)


def _loops(plan: str, node: str) -> tuple[float, int]:
    """(actual rows per loop, loops) of the one node that matches `node`."""
    (found,) = re.findall(rf"{node} .*?\(actual rows=([\d.]+) loops=(\d+)\)", plan)
    return float(found[0]), int(found[1])


def test_one_tasks_window_is_one_index_only_range_and_a_bounded_sample(fleet) -> None:
    """Fails on a window read through the heap (an Index Scan: 135-330 ms for a per-second
    task's day in the lost first attempt), a scan of occurrence or run, or runs read for every
    firing of the window instead of the newest 500."""
    params = {"now": None, "window": DAY, "ids": [1], "sample": health.RUN_SAMPLE}
    plan = _explain(fleet, "health_window", params)
    assert "Seq Scan on occurrence" not in plan, plan
    assert "Seq Scan on run" not in plan, plan
    window = r"Index Only Scan using occurrence_active_task_window_idx on occurrence_active o"
    assert _loops(plan, window) == (PER_SECOND, 1), plan
    sample = (
        r"Index Scan Backward using occurrence_active_task_scheduled_for_idx on occurrence_active"
    )
    assert _loops(plan, sample) == (health.RUN_SAMPLE, 1), plan
    assert (
        _loops(plan, r"Index Scan using run_active_occurrence_idx on run_active r")[1]
        == health.RUN_SAMPLE
    )


def test_every_tasks_verdict_reads_a_few_index_entries_per_task(fleet) -> None:
    """Fails on a verdict read that scans occurrence or run, that descends into an index per task
    for its lost rows (0.07 ms each: 690 ms at 10,000 tasks), or that reads every outcome of its
    scan (a sort above the attempts' join) instead of stopping at the N-th run."""
    params = {**SIGNALS, "after": None, "batch": None}
    plan = _explain(fleet, "health_signals", params)
    assert "Seq Scan on occurrence" not in plan, plan
    assert "Seq Scan on run" not in plan, plan
    assert not re.search(r"Sort Key: .*r\.id DESC", plan), plan  # a sort above the join
    outcomes = re.findall(
        OUTCOME_SCAN + r" \(actual rows=([\d.]+) loops=(\d+)\)",
        plan,
    )
    assert len(outcomes) == 2, plan  # the newest outcome, then the streak behind it
    assert int(outcomes[0][1]) == TASKS, plan
    assert all(float(rows) <= health.FAILING_ATTEMPTS + 1 for rows, _ in outcomes), plan
    # Runs are read only behind a newest outcome that is not a success: a third of the tasks
    # (t % 3 = 0) end in four failures, so three runs each, and the join stops there.
    assert _loops(plan, r"Index Scan Backward using run_active_occurrence_idx on run_active r") == (
        1,
        TASKS // 3 * health.FAILING_ATTEMPTS,
    ), plan
    lost = r"Index Only Scan using occurrence_active_lost_idx on occurrence_active o"
    assert _loops(plan, lost)[1] == 1, plan  # the fleet's lost rows of the window, once


def test_a_batch_of_verdicts_reads_one_name_range_of_its_tasks(fleet) -> None:
    """The console's verdict filter (ADR 0023) judges a batch after a name: fails on a batch
    read that judges every task before its LIMIT (the outcome index entered once per task)."""
    params = {**SIGNALS, "after": "", "batch": 100}
    plan = _explain(fleet, "health_signals", params)
    assert "task_name_c_idx" in plan, plan
    assert "Seq Scan on occurrence" not in plan, plan
    newest = re.findall(
        OUTCOME_SCAN + r" \(actual rows=[\d.]+ loops=(\d+)\)",
        plan,
    )
    assert newest, plan
    assert int(newest[0]) == 100, plan
