"""The first page of `tasks list` and `runs list` at scale, one run (not in CI).

Plants N tasks and a week-like per-second history (M occurrences, one run each, with a few
retries, re-queued and skipped ones) by bulk SQL in a fresh database, ANALYZEs, then times the
first page and deeper pages through the Client (each the median of five, connection included),
beside the statements they replaced, timed once (every live task sorted by name; the union of
every run and occurrence sorted before its LIMIT). Prints the figures docs/performance.md records.

    python bench/paging_first_page.py [--tasks 1000000] [--runs 600000]
    (SCHEDULER_BENCH_DATABASE_URL: a server it may create databases on; default local 5432)
"""

import argparse
import sys
import time
from pathlib import Path

import psycopg

from scheduler_daemon.client import Client
from scheduler_daemon.domain.status import RunStatus
from scheduler_daemon.storage import query

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/<this>.py`

from bench.harness import median_ms, scratch_database

OLD_TASK_LIST = "SELECT * FROM task WHERE deleted_at IS NULL ORDER BY name"
OLD_RUN_HISTORY = """
SELECT * FROM (
    SELECT r.id, o.id AS occurrence_id, o.task_id, r.status,
        coalesce(r.started_at, o.created_at) AS sort_at
    FROM run r JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id
    UNION ALL
    SELECT NULL, o.id, o.task_id, o.status, o.created_at
    FROM occurrence o JOIN task t ON t.id = o.task_id
    WHERE NOT EXISTS (SELECT 1 FROM run r WHERE r.occurrence_id = o.id)
) history
WHERE %(status)s::text IS NULL OR status = %(status)s
ORDER BY sort_at DESC, occurrence_id DESC, id DESC NULLS LAST
LIMIT 50"""


def _plant(url: str, tasks: int, runs: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '256MB'")
        conn.execute(
            """
            INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload, paused)
            SELECT 'task-' || lpad(g::text, 7, '0'), 'interval', '1 hour', now(), 'shell',
                   '{"command": "true"}', g %% 1000 = 0
            FROM generate_series(1, %(n)s) g""",
            {"n": tasks},
        )
        conn.execute(
            """
            INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap,
                                    status, reason, not_before, finished_at, attempts,
                                    lease_token)
            SELECT 1, g, now() - (%(n)s - g) * interval '1 second', 'schedule', 'allow',
                   CASE WHEN g %% 5000 = 0 THEN 'skipped' WHEN g %% 7000 = 0 THEN 'queued'
                        ELSE 'success' END,
                   CASE WHEN g %% 5000 = 0 THEN 'overlap' END, now(),
                   CASE WHEN g %% 7000 = 0 AND g %% 5000 <> 0 THEN NULL ELSE now() END, 1, 1
            FROM generate_series(1, %(n)s) g""",
            {"n": runs},
        )
        conn.execute(
            """
            INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at,
                             takeover_at, status, started_at, finished_at)
            SELECT o.id, 1, 'x', 1, now(), now(),
                   CASE WHEN o.status = 'queued' OR o.id % 1000 = 0 THEN 'failed'
                        ELSE 'success' END,
                   o.scheduled_for, o.scheduled_for + interval '10 ms'
            FROM occurrence o WHERE o.status <> 'skipped' ORDER BY o.id"""
        )
        conn.execute("VACUUM ANALYZE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=600_000)
    args = parser.parse_args()
    with scratch_database() as url:
        started = time.perf_counter()
        _plant(url, args.tasks, args.runs)
        print(
            f"planted {args.tasks} tasks, {args.runs} occurrences and their runs "
            f"in {time.perf_counter() - started:.0f} s"
        )
        client = Client(url)
        with psycopg.connect(url) as conn:
            (run_count,) = conn.execute("SELECT count(*) FROM run").fetchone()
        print(f"runs: {run_count}")
        deep = client.runs_page(limit=1, after=None).rows[0]
        middle = f"{deep.occurrence_id // 2}"
        figures = {
            "tasks list, first page (100)": client.tasks_page,
            "tasks list --prefix task-05, first page": lambda: client.tasks_page(prefix="task-05"),
            "tasks list --paused, first page": lambda: client.tasks_page(paused=True),
            "tasks list --after task-0500000": lambda: client.tasks_page(after="task-0500000"),
            "runs list, first page (100)": client.runs_page,
            "runs list --status failed, first page": lambda: client.runs_page(status="failed"),
            "runs list --status queued, first page": lambda: client.runs_page(status="queued"),
            "runs list --after (middle of the week)": lambda: client.runs_page(after=middle),
        }

        def empty_transaction() -> None:
            with client._tx():
                pass

        figures["reference: a connection and an empty transaction"] = empty_transaction
        with psycopg.connect(url, prepare_threshold=None) as conn:
            history = {
                "task_id": None,
                "status": None,
                "limit": 101,
                "after_occurrence": None,
                "after_run": None,
                "run_statuses": list(RunStatus),
            }
            tasks = {"after": None, "pattern": None, "status": None, "paused": None, "limit": 101}
            figures["statement only: task_list, first page"] = lambda: query.run(
                conn, "task_list", tasks
            )
            figures["statement only: run_history, first page"] = lambda: query.run(
                conn, "run_history", history
            )
            figures["statement only: run_history, middle of the week"] = lambda: query.run(
                conn, "run_history", {**history, "after_occurrence": int(middle)}
            )
            figures["before: every task sorted by name (old task_list)"] = lambda: conn.execute(
                OLD_TASK_LIST
            ).fetchall()
            figures["before: old run_history, first 50"] = lambda: conn.execute(
                OLD_RUN_HISTORY, {"status": None}
            ).fetchall()
            figures["before: old run_history --status failed"] = lambda: conn.execute(
                OLD_RUN_HISTORY, {"status": "failed"}
            ).fetchall()
            for label, fn in figures.items():
                print(f"{label}: {median_ms(fn, 1 if label.startswith('before') else 5):.1f} ms")


if __name__ == "__main__":
    main()
