"""`tasks health` at scale, one run (not in CI): one task, and the fleet's first page.

Plants 10,000 tasks and 1,000,000 occurrences by bulk SQL in a fresh database: one per-second
task (86,400 firings in the day, and more before it) and 9,999 half-hourly ones, with failures,
`overlap` skips under forbid, expired firings, a run for each that ran. VACUUM ANALYZEs (what
autovacuum does to a table this size), then times through the Client `tasks health NAME` for the
per-second task and a half-hourly one, and the fleet's first page and the next (each the median
of five, its transaction included), then the two statements alone, and prints the plan of the
per-second task's window. docs/performance.md records the figures; the targets are 200 ms and
1 s (issue 34 item 1).

    python bench/health.py [--tasks 10000] [--occurrences 1000000]
    (SCHEDULER_BENCH_DATABASE_URL: a server it may create databases on; default local 5432)
"""

import sys
from datetime import timedelta
from pathlib import Path

import psycopg

from scheduler_daemon.client import Client
from scheduler_daemon.domain import health
from scheduler_daemon.storage import query

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/<this>.py`

from bench.harness import median_ms, plant_then_time

DAY = timedelta(hours=24)


def _plant(url: str, tasks: int, occurrences: int) -> None:
    per_task = (occurrences - 90_000) // (tasks - 1)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '256MB'")
        conn.execute(
            """
            INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload,
                              next_run_at, start_deadline, occurrence_seq)
            SELECT CASE WHEN g = 1 THEN 'per-second'
                        ELSE 'task-' || lpad(g::text, greatest(5, length(%(n)s::text)), '0') END,
                   'interval', CASE WHEN g = 1 THEN interval '1 second'
                                    ELSE interval '30 minutes' END,
                   date_trunc('hour', now()) - interval '30 days', 'shell',
                   '{"command": "true"}', now() + interval '1 hour', interval '10 minutes',
                   CASE WHEN g = 1 THEN 90000 ELSE %(per)s END
            FROM generate_series(1, %(n)s) g""",
            {"n": tasks, "per": per_task},
        )
        conn.execute(
            """
            INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap,
                                    status, reason, not_before, finished_at, attempts,
                                    lease_token)
            SELECT t, k, s, 'schedule', 'forbid', st,
                   CASE st WHEN 'expired' THEN 'start_deadline' WHEN 'skipped' THEN 'overlap' END,
                   s, s + interval '1 second',
                   CASE WHEN st IN ('expired', 'skipped') THEN 0 ELSE 1 END, 1
            FROM (SELECT t, k, s, CASE WHEN k %% 1000 = 0 THEN 'expired'
                                       WHEN k %% 97 = 0 THEN 'skipped'
                                       WHEN k %% 50 = 0 THEN 'failed' ELSE 'success' END AS st
                  FROM (SELECT 1 AS t, k, now() - (90001 - k) * interval '1 second' AS s
                        FROM generate_series(1, 90000) k
                        UNION ALL
                        SELECT t, k, now() - (%(per)s + 1 - k) * interval '30 minutes'
                                   - (t %% 1800) * interval '1 second'
                        FROM generate_series(2, %(n)s) t, generate_series(1, %(per)s) k) f) x""",
            {"n": tasks, "per": per_task},
        )
        conn.execute(
            """
            INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at,
                             takeover_at, status, started_at, finished_at, build_revision)
            SELECT o.id, 1, 'x', 1, o.finished_at, o.finished_at, o.status,
                   o.scheduled_for + interval '50 ms', o.finished_at, 'bench'
            FROM occurrence o WHERE o.status IN ('success', 'failed') ORDER BY o.id"""
        )
        conn.execute("VACUUM ANALYZE")


def main() -> None:
    plant_then_time(__doc__, _plant, _time, tasks=10_000)


def _time(url: str) -> None:
    """The figures, over a planted database."""
    with psycopg.connect(url) as conn:
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM task), (SELECT count(*) FROM occurrence),"
            " (SELECT count(*) FROM run),"
            " (SELECT count(*) FROM occurrence WHERE task_id = 1"
            "  AND scheduled_for > now() - interval '24 hours')"
        ).fetchone()
    print(
        f"planted {counts[0]} tasks, {counts[1]} occurrences, {counts[2]} runs "
        f"({counts[3]} of the per-second task in the day)"
    )
    client = Client(url)
    first = client.health_page()
    verdicts: dict[str, int] = {}
    for row in client.health_page(limit=None).rows:
        verdicts[row.health.verdict] = verdicts.get(row.health.verdict, 0) + 1
    print(f"verdicts: {verdicts}")
    one = client.task_health("per-second")
    print(
        f"per-second: {one.health.verdict} ({one.health.cause}); expected "
        f"{one.expected}, ran {one.counts.ran}, sampled runs {one.runs}"
    )
    figures = {
        "tasks health per-second (86,400 firings in the window)": lambda: client.task_health(
            "per-second"
        ),
        "tasks health task-05000 (48 firings in the window)": lambda: client.task_health(
            "task-05000"
        ),
        "tasks health, the fleet's first page (100)": client.health_page,
        "tasks health, the second page": lambda: client.health_page(after=first.after),
    }
    with psycopg.connect(url, prepare_threshold=None) as conn:
        query.run(conn, "health_jit_off")  # as the Client runs them: the transaction stays open
        signals = {
            "now": None,
            "window": DAY,
            "id": None,
            "attempts": health.FAILING_ATTEMPTS,
            "scan": health.ATTEMPT_SCAN,
        }
        window = {"now": None, "window": DAY, "ids": [1], "sample": health.RUN_SAMPLE}
        page = {**window, "ids": [r.task_id for r in first.rows]}
        figures["statement only: health_signals, every task"] = lambda: query.run(
            conn, "health_signals", signals
        )
        figures["statement only: health_window, per-second"] = lambda: query.run(
            conn, "health_window", window
        )
        figures["statement only: health_window, the first page's 100"] = lambda: query.run(
            conn, "health_window", page
        )
        for label, fn in figures.items():
            print(f"{label}: {median_ms(fn):.1f} ms")
        plan = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + query.QUERIES["health_window"].sql,
            window,
        ).fetchall()
        print("plan of health_window, per-second:")
        for (line,) in plan:
            print(f"  {line}")


if __name__ == "__main__":
    main()
