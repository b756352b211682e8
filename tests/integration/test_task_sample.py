"""The per-task sample (storage/task_sample.py) over planted rows: the kept set is the first
live tasks by id, the rest fold into `_other`; failures count since the last success only, up to
FAILURES_CAP, and a history without a success is read no further than that (ADR 0026); lost
firings count a summary row's firings and map an unknown reason to `other`; times are the
database's own."""

from typing import Any

import psycopg
import pytest

from scheduler_daemon.domain.task_figures import FAILURES_CAP, OTHER_TASK
from scheduler_daemon.storage import query, task_sample
from tests.integration.test_query_plans import _plan, _seed


def _task(db: psycopg.Connection[Any], name: str, **columns: Any) -> int:
    values = {"paused": False, "next_run_at": "2030-01-01T00:00:00Z", **columns}
    row = db.execute(
        """INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload, paused,
                             next_run_at, occurrence_seq)
           VALUES (%(name)s, 'interval', '1 hour', now(), 'shell', '{"command": "true"}',
                   %(paused)s, %(next_run_at)s, 100) RETURNING id""",
        {"name": name, **values},
    ).fetchone()
    assert row is not None
    return int(row["id"])


def _occurrence(
    db: psycopg.Connection[Any],
    task_id: int,
    seq: int,
    status: str,
    *,
    reason: str | None = None,
    trigger: str = "schedule",
    count: int = 1,
) -> None:
    db.execute(
        """INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, last_scheduled_for,
                                  firing_count, trigger, overlap, status, reason, not_before,
                                  finished_at, claim_owner, claim_expires_at)
           SELECT %(task_id)s, %(seq)s, at, CASE WHEN %(count)s > 1 THEN at + interval '1 min' END,
                  %(count)s, %(trigger)s, 'allow', %(status)s, %(reason)s, at,
                  CASE WHEN %(status)s NOT IN ('queued', 'launching', 'running')
                       THEN at + interval '1 s' END,
                  CASE WHEN %(status)s = 'launching' THEN 'x' END,
                  CASE WHEN %(status)s = 'launching' THEN at END
           FROM (SELECT timestamptz '2029-01-01T00:00:00Z' + %(seq)s * interval '1 hour'
                 AS at) t""",
        {
            "task_id": task_id,
            "seq": seq,
            "status": status,
            "reason": reason,
            "trigger": trigger,
            "count": count,
        },
    )


def _outcomes(db: psycopg.Connection[Any], task_id: int, first: int, statuses: list[str]) -> int:
    """Occurrences `first`, `first + 1`, … of the task, finished with `statuses` in turn, a
    minute apart, in one statement; returns the next sequence number."""
    db.execute(
        """INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap,
                                  status, reason, not_before, finished_at)
           SELECT %(task_id)s, %(first)s + i - 1, at, 'schedule', 'allow', s.status,
                  CASE WHEN s.status IN ('cancelled', 'expired') THEN 'planted' END, at,
                  at + interval '1 s'
           FROM unnest(%(statuses)s::text[]) WITH ORDINALITY s(status, i),
                LATERAL (SELECT timestamptz '2029-01-01T00:00:00Z'
                                + (%(first)s + i) * interval '1 min' AS at) a""",
        {"task_id": task_id, "first": first, "statuses": statuses},
    )
    return first + len(statuses)


def _epoch(db: psycopg.Connection[Any], text: str) -> float:
    row = db.execute("SELECT extract(epoch FROM %s::timestamptz)::float8 AS e", [text]).fetchone()
    assert row is not None
    return float(row["e"])


def test_the_sample_names_the_oldest_tasks_and_folds_the_rest(db, pool) -> None:
    ok = _task(db, "zz-ok")  # the lowest id: kept although its name sorts last
    _occurrence(db, ok, 1, "failed")
    _occurrence(db, ok, 2, "success")
    _occurrence(db, ok, 3, "running")
    bad = _task(db, "bad", paused=True)
    _occurrence(db, bad, 1, "success")
    for seq, status in enumerate(["failed", "cancelled", "timeout", "interrupted"], start=2):
        _occurrence(db, bad, seq, status, reason="by hand" if status == "cancelled" else None)
    _occurrence(db, bad, 6, "skipped", reason="overlap")
    _occurrence(db, bad, 7, "success", trigger="backfill")  # an older firing, run again
    _occurrence(db, bad, 8, "failed", trigger="manual")
    lost = _task(db, "lost")
    _occurrence(db, lost, 1, "skipped", reason="misfired", count=5)
    _occurrence(db, lost, 2, "skipped", reason="coalesced")
    _occurrence(db, lost, 3, "expired", reason="start_deadline")
    _occurrence(db, lost, 4, "skipped", reason="written by hand")
    gone = _task(db, "gone")
    _occurrence(db, gone, 1, "failed")
    db.execute("UPDATE task SET deleted_at = now() WHERE id = %s", [gone])
    late = [_task(db, f"a-late-{i}") for i in range(3)]  # names that sort first, ids last
    _occurrence(db, late[0], 1, "failed")
    _occurrence(db, late[0], 2, "failed")
    _occurrence(db, late[1], 1, "running")
    _occurrence(db, late[1], 2, "skipped", reason="overlap", count=2)
    _occurrence(db, late[2], 1, "launching")

    figures, lost_firings = task_sample.sample(pool, 3)
    by_task = {f.task: f for f in figures}
    assert sorted(by_task) == sorted(["zz-ok", "bad", "lost", OTHER_TASK])

    assert by_task["zz-ok"].last_success == _epoch(db, "2029-01-01T02:00:01Z")
    assert by_task["zz-ok"].last_schedule == _epoch(db, "2029-01-01T03:00:00Z")
    assert by_task["zz-ok"].next_schedule == _epoch(db, "2030-01-01T00:00:00Z")
    assert (by_task["zz-ok"].running, by_task["zz-ok"].failures) == (1, 0)
    # Failed, timeout, interrupted and a manual failure since the last success; the cancelled
    # and skipped ones neither count nor reset. The backfilled success is the newest success
    # by sequence, so the count starts after it.
    assert by_task["bad"].last_success == _epoch(db, "2029-01-01T07:00:01Z")
    assert by_task["bad"].failures == 1
    assert by_task["bad"].next_schedule is None  # paused
    assert by_task["bad"].last_schedule == _epoch(db, "2029-01-01T06:00:00Z")  # not backfill
    assert by_task["lost"].last_success is None
    assert by_task["lost"].last_schedule == _epoch(db, "2029-01-01T04:00:00Z")
    other = by_task[OTHER_TASK]
    assert (other.running, other.failures) == (2, 2)
    assert (other.last_success, other.last_schedule, other.next_schedule) == (None, None, None)

    assert lost_firings == {
        ("bad", "overlap"): 1,
        ("lost", "misfired"): 5,
        ("lost", "coalesced"): 1,
        ("lost", "start_deadline"): 1,
        ("lost", "other"): 1,
        (OTHER_TASK, "overlap"): 2,
    }


def test_the_failures_count_back_to_the_last_success(db, pool) -> None:
    task = _task(db, "flaky")
    for seq, status in enumerate(["failed", "success", "failed", "failed", "success"], start=1):
        _occurrence(db, task, seq, status)
    (figures,), _ = task_sample.sample(pool, 10)
    assert figures.failures == 0
    _occurrence(db, task, 6, "timeout")
    _occurrence(db, task, 7, "failed")
    (figures,), _ = task_sample.sample(pool, 10)
    assert figures.failures == 2


def test_the_failures_gauge_counts_up_to_its_cap(db, pool) -> None:
    # A task that never succeeded in the history kept reads FAILURES_CAP, not its count; under
    # the cap the count is exact, and a success starts it again.
    never = _task(db, "never")
    _outcomes(db, never, 1, ["failed", "timeout", "interrupted"] * (FAILURES_CAP // 3 + 100))
    under = _task(db, "under")
    seq = _outcomes(db, under, 1, ["failed"] * (FAILURES_CAP - 1) + ["cancelled", "expired"])
    by_task = {f.task: f for f in task_sample.sample(pool, 10)[0]}
    assert (by_task["never"].failures, by_task["never"].last_success) == (FAILURES_CAP, None)
    assert by_task["under"].failures == FAILURES_CAP - 1

    _outcomes(db, under, seq, ["success", "failed", "expired", "timeout"])
    by_task = {f.task: f for f in task_sample.sample(pool, 10)[0]}
    assert by_task["under"].failures == 2
    assert by_task["under"].last_success is not None


def _occurrence_rows_read(node: dict[str, Any]) -> int:
    """Rows every scan of `occurrence` (its partitions: issue 47) in the plan produced or threw
    away, over all its loops."""
    read = 0
    if str(node.get("Relation Name", "")).startswith("occurrence"):
        kept = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
        read += (kept + node.get("Rows Removed by Index Recheck", 0)) * node["Actual Loops"]
    return read + sum(_occurrence_rows_read(child) for child in node.get("Plans", []))


def test_a_history_without_a_success_is_read_no_further_than_the_cap(db) -> None:
    # Fails on the statement before revision 0037 (ADR 0026): it walked occurrence_task_outcome_idx
    # back to the first outcome looking for a success, then counted every failure since
    # (18,000 rows here); with 0037's indexes beside it, it still counted all 3,000 failures.
    # Cancelled and expired outcomes, which the gauge neither counts nor resets, are
    # interleaved so that a walk over every outcome would show too.
    failing = _task(db, "failing")
    _outcomes(db, failing, 1, ["failed", "expired", "cancelled"] * (3 * FAILURES_CAP))
    for name in ("ok-1", "ok-2"):
        _outcomes(db, _task(db, name), 1, ["failed", "success", "failed"])
    db.execute("ANALYZE occurrence")
    row = db.execute(
        f"EXPLAIN (ANALYZE, FORMAT JSON) {query.QUERIES['task_metrics_sample'].sql}",
        task_sample.params(10),
    ).fetchone()
    assert row is not None
    read = _occurrence_rows_read(row["QUERY PLAN"][0]["Plan"])
    # The failing task's cap, its last_success and newest firing probes (a row each at most),
    # and each other task's few rows.
    assert 0 < read <= FAILURES_CAP + 20, read


def test_a_limit_of_zero_folds_every_task(db, pool) -> None:
    _occurrence(db, _task(db, "one"), 1, "failed")
    _task(db, "two")
    figures, _ = task_sample.sample(pool, 0)
    assert [(f.task, f.failures, f.last_success) for f in figures] == [(OTHER_TASK, 1, None)]


@pytest.mark.parametrize(
    ("name", "indexes"),
    [
        (
            "task_metrics_sample",
            (
                "occurrence_active_task_success_idx",
                "occurrence_active_task_failure_idx",
                "occurrence_active_task_scheduled_for_idx",
            ),
        ),
        # Either partial index holds the skipped and expired rows; occurrence_lost_idx (revision
        # 0024, `tasks health`) holds only those.
        ("task_lost_firings", ("occurrence_active_lost_idx|occurrence_own_row_idx",)),
    ],
)
def test_the_sample_reads_each_task_through_its_indexes(database_url, name, indexes) -> None:
    # Its per-task look-ups stay index probes however long the history (the 10,000-task
    # figures in docs/performance.md depend on it). Before revision 0037 the sample walked
    # occurrence_task_outcome_idx back to the last success, unbounded (ADR 0026).
    _seed(database_url)
    plan = _plan(database_url, name, task_sample.params(500))
    assert all(any(i in plan for i in index.split("|")) for index in indexes), plan
    assert "Seq Scan on occurrence" not in plan, plan
    assert "occurrence_active_task_outcome_idx" not in plan, plan
