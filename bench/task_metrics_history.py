"""The per-task sample before and after revision 0037 (ADR 0026), one sitting, one database: a fleet
of ordinary tasks beside a few whose whole kept history failed (no success to stop the old walk).

    git show 8f1c9c9:sql/task.sql > /tmp/old_task.sql   # the statement before 0037
    python bench/task_metrics_history.py /tmp/old_task.sql [--tasks 10000] [--per-task 50]
        [--heavy 1000000,2000000] [--limit 500] [--rounds 5]
    (SCHEDULER_BENCH_DATABASE_URL: a server it may create databases on; default local 5432)

Migrates a fresh database to the baseline and drops 0037's indexes (0036, as it was), plants
`--tasks` tasks with `--per-task` finished occurrences each (as bench/task_metrics.py: mostly
successes, a few failed, skipped and expired), and `--heavy` of those tasks (spread over the
ids) with that many failed occurrences each and no success (a per-second task failing through
its retention), VACUUM ANALYZE; builds the indexes again (0037's CONCURRENTLY builds timed, the
indexes' sizes printed), ANALYZE. Then, `--rounds` rounds alternated: the old
`task_metrics_sample` (from OLD_TASK_SQL) as it ran before 0037 (the indexes dropped in a
transaction rolled back), this tree's, and the old one beside the indexes;
medians, and the buffers each touched under EXPLAIN (ANALYZE, BUFFERS), a figure the machine's
load does not move. JIT off, as session_jit_off sets it for the sample. Prints old/new.
"""

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/<this>.py`

from bench.harness import DEFAULT_SERVER, drop_database, fresh_database, plant_minute_tasks
from scheduler_daemon.storage import migration, query, task_sample

# 0037's indexes, dropped after the baseline to stand for revision 0036 (issue 45 squashed the
# chain), then built again as 0037 built them.
BUILD_INDEXES = (
    "CREATE INDEX CONCURRENTLY occurrence_task_success_idx ON occurrence "
    "(task_id, occurrence_seq) WHERE status = 'success'",
    "CREATE INDEX CONCURRENTLY occurrence_task_failure_idx ON occurrence "
    "(task_id, occurrence_seq) WHERE status IN ('failed', 'timeout', 'interrupted')",
)
NAME = "task_metrics_sample"


def _old_statement(path: Path) -> str:
    """The old file's statement, its fragments (of the same file) included."""
    found = {q.name: q for q in query.parse(path.read_text(), "old")}
    sql = found[NAME].sql
    while "{{" in sql:
        for name, q in found.items():
            sql = sql.replace("{{" + name + "}}", q.sql)
    return sql


def _plant(url: str, tasks: int, per: int, heavy: list[int]) -> list[int]:
    """The ordinary fleet, then the heavy tasks' failures; returns the heavy tasks' ids."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '256MB'")
        plant_minute_tasks(conn, tasks, per)
        conn.execute(
            """
            INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap,
                                    status, reason, not_before, finished_at, attempts,
                                    lease_token)
            SELECT t.id, s, f.at, 'schedule', 'forbid', f.status,
                   CASE f.status WHEN 'skipped' THEN 'overlap'
                                 WHEN 'expired' THEN 'start_deadline' END,
                   f.at, f.at + interval '1 s', 1, 1
            FROM task t
            CROSS JOIN generate_series(1, %(per)s) s
            CROSS JOIN LATERAL (
                SELECT now() - (%(per)s - s) * interval '1 minute' AS at,
                    CASE WHEN t.id %% 97 = 0 AND s > %(per)s - 5 THEN 'failed'
                         WHEN s %% 25 = 0 THEN 'expired'
                         WHEN s %% 20 = 0 THEN 'skipped'
                         WHEN s %% 10 = 3 THEN 'failed'
                         ELSE 'success' END AS status
            ) f""",
            {"per": per},
        )
        ids = [1 + i * (tasks - 1) // max(len(heavy) - 1, 1) for i in range(len(heavy))]
        for task_id, count in zip(ids, heavy, strict=True):
            conn.execute("DELETE FROM occurrence WHERE task_id = %s", [task_id])
            conn.execute(
                """
                INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap,
                                        status, not_before, finished_at, attempts, lease_token)
                SELECT %(id)s, s, at, 'schedule', 'forbid', 'failed', at, at + interval '1 s',
                       1, 1
                FROM generate_series(1, %(n)s) s,
                     LATERAL (SELECT now() - (%(n)s - s) * interval '1 second' AS at) a""",
                {"id": task_id, "n": count},
            )
            conn.execute(
                "UPDATE task SET every = '1 second', occurrence_seq = %s WHERE id = %s",
                [count, task_id],
            )
        conn.execute("VACUUM ANALYZE")
    return ids


INDEXES = ("occurrence_task_success_idx", "occurrence_task_failure_idx")
# (label, statement, 0037's indexes hidden): the old statement as it ran before 0037, this
# tree's, and the old one beside the indexes (which they do not bound: it counts every failure).
Variant = tuple[str, str, bool]


def _once(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any], hidden: bool) -> Any:
    """Runs `sql` in a transaction rolled back; with `hidden`, 0037's indexes are dropped in it
    first (a catalog change, undone by the rollback), so the planner plans as before 0037."""
    with conn.transaction(force_rollback=True):
        if hidden:
            conn.execute(f"DROP INDEX {', '.join(INDEXES)}")
        return conn.execute(sql, params).fetchall()


def _buffers(conn: psycopg.Connection[Any], variant: Variant, params: dict[str, Any]) -> int:
    _, sql, hidden = variant
    (row,) = _once(conn, f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params, hidden)
    plan = (row[0] if not isinstance(row[0], str) else json.loads(row[0]))[0]["Plan"]
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


def _alternated(
    url: str, variants: list[Variant], params: dict[str, Any], rounds: int
) -> dict[str, tuple[float, int]]:
    """Each variant once a round, in turn (the machine's load moves from minute to minute):
    median milliseconds, and the buffers one EXPLAIN (ANALYZE, BUFFERS) touched."""
    spent: dict[str, list[float]] = {label: [] for label, _, _ in variants}
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn:
        conn.execute("SET jit = off")
        for _ in range(rounds):
            for label, sql, hidden in variants:
                started = time.perf_counter()
                _once(conn, sql, params, hidden)
                spent[label].append((time.perf_counter() - started) * 1000)
        return {
            variant[0]: (statistics.median(spent[variant[0]]), _buffers(conn, variant, params))
            for variant in variants
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old_sql", type=Path, help="sql/task.sql before revision 0037")
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--per-task", type=int, default=50)
    parser.add_argument("--heavy", default="1000000,2000000", help="failed rows per heavy task")
    parser.add_argument("--limit", type=int, default=500, help="--metrics-task-limit")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    heavy = [int(n) for n in args.heavy.split(",") if n]
    old = _old_statement(args.old_sql)
    variants = [
        ("old (before 0037)", old, True),
        ("new", query.QUERIES[NAME].sql, False),
        ("old beside 0037's indexes", old, False),
    ]
    params = task_sample.params(args.limit)
    server = os.environ.get("SCHEDULER_BENCH_DATABASE_URL", DEFAULT_SERVER)
    name = f"sd_bench_{uuid.uuid4().hex[:8]}"
    url = fresh_database(server, name, migrate=False)
    try:
        migration.upgrade(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP INDEX occurrence_task_success_idx, occurrence_task_failure_idx")
        started = time.perf_counter()
        ids = _plant(url, args.tasks, args.per_task, heavy)
        with psycopg.connect(url) as conn:
            (count,) = conn.execute("SELECT count(*) FROM occurrence").fetchone() or (0,)
        print(
            f"planted {args.tasks:,} tasks, {count:,} occurrences (heavy tasks {ids}: "
            f"{args.heavy or 'none'} failed, no success) in {time.perf_counter() - started:.0f} s"
        )
        started = time.perf_counter()
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in BUILD_INDEXES:
                conn.execute(statement)  # type: ignore[arg-type]
        print(f"0036 -> head (0037's CONCURRENTLY builds): {time.perf_counter() - started:.1f} s")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ANALYZE occurrence")
            for index in INDEXES:
                (size,) = conn.execute(
                    "SELECT pg_size_pretty(pg_relation_size(%s::regclass))", [index]
                ).fetchone() or ("?",)
                print(f"  {index}: {size}")
            conn.execute("SET jit = off")
            rows = conn.execute(query.QUERIES[NAME].sql, params).fetchall()
        print(
            f"task_metrics_sample, --metrics-task-limit {args.limit}, JIT off, "
            f"{args.rounds} rounds alternated (largest failures gauge now "
            f"{max(r[5] for r in rows)}):"
        )
        figures = _alternated(url, variants, params, args.rounds)
        for label, (ms, buffers) in figures.items():
            print(f"  {label}: {ms:,.1f} ms (median), {buffers:,} buffers")
        (old_ms, old_buffers), (new_ms, new_buffers) = (figures[v[0]] for v in variants[:2])
        print(
            f"old/new: {old_ms / new_ms:,.1f}x the time, "
            f"{old_buffers / max(new_buffers, 1):,.1f}x the buffers"
        )
    finally:
        drop_database(server, name)


if __name__ == "__main__":
    main()
