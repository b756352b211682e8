"""EXPLAIN (ANALYZE, BUFFERS) of the hot statements over a seeded database, each in a transaction
rolled back afterwards, so the plans in docs/performance.md come from the named SQL as shipped."""

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from bench.harness import drop_database, fresh_database, seed_tasks

# The statements of the claim → launch → renew → complete path and of the idle loop: every named
# query whose name starts with one of these (the rebuilt hot path's new names included).
HOT = (
    "occurrence_claim_launch",
    "occurrence_dispatch",
    "occurrence_finish",
    "occurrence_insert_many",
    "run_insert",
    "run_launch",
    "run_renew",
    "run_succeed_many",
    "run_finish",
    "run_complete",
    "task_claim_due",
    "task_next_due",
    "task_lock_ref",
    "task_unfinished_one_shots",
)

# Where one statement needs a value the superset gives another one.
OVERRIDES: dict[str, dict[str, Any]] = {
    "occurrence_insert_many": {"status": "queued"},
    "occurrence_dispatch": {"statuses": ["queued"]},
}

SEED_OCCURRENCES = """
INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, status,
    not_before, finished_at, reason)
SELECT 1, g, now() - interval '1 day' + g * interval '1 ms', 'manual', 'allow',
    CASE WHEN g <= %(finished)s THEN 'success' ELSE 'queued' END,
    now() - interval '1 day', CASE WHEN g <= %(finished)s THEN now() END, NULL
FROM generate_series(1, %(total)s) g
"""
# Every finished occurrence has its successful run; the newest 100 unfinished ones are running
# with a run each, held by 'explain' (the renewal and completion statements' rows).
SEED_RUNS = """
UPDATE occurrence SET lease_token = 1, attempts = 1 WHERE status = 'success';
INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at, takeover_at,
    status, started_at, finished_at, build_revision)
SELECT id, 1, 'explain', 1, now(), now(), 'success', now(), now(), 'explain'
FROM occurrence WHERE status = 'success';
UPDATE occurrence SET status = 'running', attempts = 1, lease_token = 1
WHERE id IN (SELECT id FROM occurrence WHERE status = 'queued' ORDER BY id DESC LIMIT 100);
INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at, takeover_at,
    started_at, build_revision)
SELECT id, 1, 'explain', 1, now() + interval '15 s', now() + interval '20 s', now(), 'explain'
FROM occurrence WHERE status = 'running'
"""


def _params(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """A superset of every hot statement's parameters, pointing at real rows."""
    occurrence = conn.execute(
        "SELECT id, lease_token FROM occurrence WHERE status = 'queued' ORDER BY id LIMIT 1"
    ).fetchone()
    assert occurrence is not None
    running = conn.execute(
        "SELECT id, occurrence_id FROM run WHERE status = 'running' ORDER BY id LIMIT 10"
    ).fetchall()
    ids = [r["id"] for r in running]
    # A held lease names its run's own occurrence (run_renew matches run, occurrence and token).
    OVERRIDES["run_renew"] = {"occurrence_ids": [r["occurrence_id"] for r in running]}
    ttl, grace = timedelta(seconds=15), timedelta(seconds=5)
    return {
        "owner": "explain",
        "limit": 10,
        "claim_ttl": ttl,
        "ttl": ttl,
        "grace": grace,
        "lease_ttl": ttl,
        "lease_grace": grace,
        "now": datetime.now(UTC),  # pinned, as tests pin it (production passes NULL)
        "id": occurrence["id"],
        "occurrence_id": occurrence["id"],
        "ids": ids,
        "occurrence_ids": ids,
        "run_ids": ids,
        "tokens": [1] * len(ids),
        "token": 1,
        "attempt": 1,
        "attempts": [1] * len(ids),
        "build_revision": "explain",
        "known": ["0038"],  # the revisions of the build's chain (ADR 0029)
        "status": "success",
        "statuses": ["success"] * len(ids),
        "error": None,
        "errors": [None] * len(ids),
        "exit_codes": [0] * len(ids),
        "http_statuses": [None] * len(ids),
        "output_tails": [None] * len(ids),
        "task_ids": [1] * len(ids),
        "reason": None,
        "exit_code": 0,
        "output_tail": None,
        "http_status": None,
        "task_id": 1,
        "first_seq": 1_000_001,
        "last_seq": 1_000_100,
        "trigger": "manual",
        "overlap": "allow",
        "concurrency_key": None,
        "requested_by": "explain",
        "name": "stored-5",
        "after": 0,
        "count": 1,
        "finished": ["success"],
        "budget_key": 0,
        "key": 0,
        "slots": 10,
        "channel": "explain",
        "wake": False,
        "scheduled_fors": [datetime.now(UTC) + timedelta(days=1)],  # a firing not yet recorded
        "last_scheduled_fors": [None],
        "firing_counts": [1],
        "reasons": [None],
        "next_run_at": None,
        "once_fired": False,
    }


def _nested(conn: psycopg.Connection[Any], call: str, values: dict[str, Any]) -> list[str]:
    """The analyzed plans of the statements a hot-path function runs (migration 0012), from
    auto_explain (an EXPLAIN of the call shows only its Function Scan); rolled back."""
    plans: list[str] = []

    def keep(diagnostic: psycopg.errors.Diagnostic) -> None:
        text = diagnostic.message_primary or ""
        if "plan:" in text:
            plans.extend(text.split("plan:\n", 1)[1].splitlines())

    conn.execute("LOAD 'auto_explain'")
    for setting in (
        "log_min_duration = 0",
        "log_nested_statements = on",
        "log_analyze = on",
        "log_buffers = on",
        "log_timing = off",
        "log_level = notice",
    ):
        conn.execute(f"SET auto_explain.{setting}")
    conn.add_notice_handler(keep)
    try:
        with conn.transaction(force_rollback=True):
            psycopg.ClientCursor(conn).execute(call, values)
    finally:
        conn.remove_notice_handler(keep)
        conn.execute("RESET auto_explain.log_min_duration")
    return plans


def explain(server: str, tasks: int, occurrences: int) -> str:
    from scheduler_daemon.storage.query import QUERIES

    url = fresh_database(server, "sd_bench_explain")
    out: list[str] = []
    try:
        seed_tasks(url, tasks)
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
            conn.execute(SEED_OCCURRENCES, {"finished": occurrences - 1000, "total": occurrences})
            conn.execute("UPDATE task SET occurrence_seq = %s WHERE id = 1", (occurrences,))
            for statement in SEED_RUNS.split(";"):
                conn.execute(statement)
            conn.execute("VACUUM ANALYZE")
            params = _params(conn)
            out.append(
                f"-- {tasks:,} tasks, {occurrences:,} occurrences ({1000:,} queued), "
                f"PostgreSQL {conn.info.server_version}"
            )
            for name in sorted(n for n in QUERIES if n.startswith(HOT)):
                out.append(f"\n## {name}\n```")
                try:
                    # A query of several statements (the claim: its planner settings and the
                    # budget lock first) runs them in the transaction and explains the last.
                    *first, last = QUERIES[name].sql.split(";\n")
                    values = {**params, **OVERRIDES.get(name, {})}
                    if re.search(r"\bsd_\w+_v\d+\(", last):  # a function's: auto_explain
                        out.extend(_nested(conn, last, values))
                        continue
                    with conn.transaction(force_rollback=True):
                        if first:
                            psycopg.ClientCursor(conn).execute(";\n".join(first), values)
                        rows = conn.execute(
                            "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, SUMMARY OFF) " + last, values
                        ).fetchall()
                    out.extend(r["QUERY PLAN"] for r in rows)
                except (psycopg.Error, KeyError) as exc:
                    out.append(f"(not explained: {type(exc).__name__}: {exc})".splitlines()[0])
                finally:
                    out.append("```")
    finally:
        drop_database(server, "sd_bench_explain")
    return "\n".join(out)
