"""The per-task gauges at scale, one run (not in CI): the sample every replica reads at most once
per TASK_SAMPLE_SECONDS, and the formatting of one scrape.

Plants N tasks and M finished occurrences (a few failed, timed out, skipped for overlap or
misfired, expired, and some running) by bulk SQL in a fresh database, ANALYZEs, then times the
sample (task_sample.sample over a pool: both statements in one round trip) and one scrape's
exposition (prometheus_client's generate_latest of a daemon's registry with the sample cached),
each the median of five, at --metrics-task-limit 500 and at N (every task named).

    python bench/task_metrics.py [--tasks 10000] [--occurrences 1000000]
    (SCHEDULER_BENCH_DATABASE_URL: a server it may create databases on; default local 5432)
"""

import argparse
import sys
import time
from pathlib import Path

import psycopg
from prometheus_client import generate_latest

from scheduler_daemon.runtime.metrics import Metrics
from scheduler_daemon.runtime.task_metrics import TaskGauges
from scheduler_daemon.storage import query, task_sample
from scheduler_daemon.storage.database import make_pool

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/<this>.py`

from bench.harness import median_ms, plant_minute_tasks, scratch_database


def _plant(url: str, tasks: int, occurrences: int) -> None:
    """Each task gets occurrences // tasks firings a minute apart, newest now; 1 in 50 failed,
    1 in 200 timed out, 1 in 20 skipped (overlap), 1 in 100 misfired, 1 in 500 expired; every
    97th task failing since its last 5 firings; every 50th task's newest firing running."""
    per = occurrences // tasks
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '256MB'")
        plant_minute_tasks(conn, tasks, per)
        conn.execute(
            """
            INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap,
                                    status, reason, not_before, finished_at, attempts,
                                    lease_token, claim_owner, claim_expires_at)
            SELECT t.id, s, f.at, 'schedule', 'forbid', f.status,
                   CASE f.status WHEN 'skipped' THEN
                            CASE WHEN s %% 100 = 0 THEN 'misfired' ELSE 'overlap' END
                        WHEN 'expired' THEN 'start_deadline' END,
                   f.at, CASE WHEN f.status NOT IN ('running') THEN f.at + interval '1 s' END,
                   1, 1, NULL, NULL
            FROM task t
            CROSS JOIN generate_series(1, %(per)s) s
            CROSS JOIN LATERAL (
                SELECT now() - (%(per)s - s) * interval '1 minute' AS at,
                    CASE WHEN s = %(per)s AND t.id %% 50 = 0 THEN 'running'
                         WHEN t.id %% 97 = 0 AND s > %(per)s - 5 THEN 'failed'
                         WHEN s %% 500 = 0 THEN 'expired'
                         WHEN s %% 100 = 0 OR s %% 20 = 0 THEN 'skipped'
                         WHEN s %% 200 = 1 THEN 'timeout'
                         WHEN s %% 50 = 3 THEN 'failed'
                         ELSE 'success' END AS status
            ) f""",
            {"per": per},
        )
        conn.execute("VACUUM ANALYZE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--occurrences", type=int, default=1_000_000)
    args = parser.parse_args()
    with scratch_database() as url:
        started = time.perf_counter()
        _plant(url, args.tasks, args.occurrences)
        with psycopg.connect(url) as conn:
            (count,) = conn.execute("SELECT count(*) FROM occurrence").fetchone() or (0,)
        print(
            f"planted {args.tasks} tasks and {count} occurrences "
            f"in {time.perf_counter() - started:.0f} s"
        )
        pool = make_pool(url, max_size=1, name="bench")
        pool.open(wait=True)
        try:
            for limit in (500, args.tasks):
                metrics = Metrics("bench", "bench", 4)
                gauges = TaskGauges(lambda limit=limit: task_sample.sample(pool, limit))
                metrics.registry.register(gauges)
                sampled = median_ms(gauges.refresh)
                body = generate_latest(metrics.registry)
                series = sum(
                    1 for line in body.splitlines() if line.startswith(b"scheduler_daemon_task_")
                )
                scrape = median_ms(lambda metrics=metrics: generate_latest(metrics.registry))
                print(
                    f"--metrics-task-limit {limit}: sample {sampled:.1f} ms (both statements, "
                    f"one round trip), one scrape formatted {scrape:.1f} ms, "
                    f"{series} per-task series, {len(body)} bytes"
                )
                params = task_sample.params(limit)
                with psycopg.connect(url, prepare_threshold=None) as conn:
                    conn.execute("SET jit = off")
                    for name in ("task_metrics_sample", "task_lost_firings"):
                        alone = median_ms(lambda n=name, p=params: query.run(conn, n, p))
                        print(f"  statement only: {name}: {alone:.1f} ms")
        finally:
            pool.close()


if __name__ == "__main__":
    main()
