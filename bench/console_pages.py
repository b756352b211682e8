"""The web console's server time per page at scale, one run (not in CI): issue 36 asks every
page ≤ 200 ms at 100,000 tasks and 1,000,000 runs.

Plants the tasks and occurrences as `bench/health.py` does (one per-second task with 90,000
firings, the rest half-hourly; failures, skips, expiries, a run for each that ran) plus a few
hundred running runs, VACUUM ANALYZEs, then requests each page through the console's ASGI app
in-process and reads its `Server-Timing` header (the endpoint's time: the reads, the template;
not the socket): the median of five per page.

    python bench/console_pages.py [--tasks 100000] [--occurrences 1000000] [--keep | --reuse URL]
    (SCHEDULER_BENCH_DATABASE_URL: a server it may create databases on; default local 5432)
"""

import statistics
import sys
from pathlib import Path

import psycopg
from starlette.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/<this>.py`

from bench.harness import plant_then_time
from bench.health import _plant
from scheduler_daemon.client import Client
from scheduler_daemon.console.app import build_app
from scheduler_daemon.console.guard import Guard

RUNNING = 300  # running runs planted for "running now" (more than its 200-row page)


def _plant_running(url: str) -> None:
    """Running runs on the newest queued-free occurrences of RUNNING half-hourly tasks."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            """
            WITH picked AS (
                SELECT DISTINCT ON (task_id) id FROM occurrence
                WHERE task_id BETWEEN 2 AND %(n)s + 1 ORDER BY task_id, id DESC)
            UPDATE occurrence o
            SET status = 'running', finished_at = NULL, claim_owner = 'x', lease_token = 2
            FROM picked WHERE o.id = picked.id""",
            {"n": RUNNING},
        )
        conn.execute(
            """
            INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at,
                             takeover_at, status, started_at, build_revision)
            SELECT o.id, 2, 'x', 2, now() + interval '1 hour', now() + interval '1 hour',
                   'running', now(), 'bench'
            FROM occurrence o WHERE o.status = 'running'"""
        )
        conn.execute("ANALYZE")


def main() -> None:
    plant_then_time(__doc__, _plant_with_running, _time, tasks=100_000)


def _plant_with_running(url: str, tasks: int, occurrences: int) -> None:
    _plant(url, tasks, occurrences)
    _plant_running(url)


def _time(url: str) -> None:
    with psycopg.connect(url) as conn:
        tasks, occurrences, runs, some = conn.execute(
            "SELECT (SELECT count(*) FROM task), (SELECT count(*) FROM occurrence),"
            " (SELECT count(*) FROM run), (SELECT max(id) FROM occurrence WHERE task_id = 2)"
        ).fetchone()
    print(f"{tasks} tasks, {occurrences} occurrences, {runs} runs")
    digits = max(5, len(str(tasks)))  # as bench/health.py names them
    half = f"{tasks // 2:0{digits}d}"
    pages = {
        "fleet": "/",
        "tasks, first page": "/tasks",
        "tasks, a name prefix": f"/tasks?prefix=task-{'0' * (digits - 2)}",
        "tasks, status enabled, a later page": f"/tasks?status=enabled&after=task-{half}",
        "tasks, verdict failing (at most 5,000 judged)": "/tasks?verdict=failing",
        "tasks, verdict healthy (a full page)": "/tasks?verdict=healthy",
        "task: per-second (90,000 firings)": "/tasks/1",
        "task: half-hourly": "/tasks/5000",
        "running now (200 of 300)": "/running",
        "occurrence": f"/occurrences/{some}",
    }
    with Client(url) as client:
        guard = Guard(writes=False, token=None, trust_header=None)
        # a Host the console answers to (its allow-list: localhost, 127.0.0.1, ::1)
        with TestClient(build_app(client, guard), base_url="http://127.0.0.1") as http:
            for label, path in pages.items():
                times = []
                for _ in range(5):
                    response = http.get(path)
                    assert response.status_code == 200, (path, response.text[:500])
                    times.append(float(response.headers["server-timing"].split("dur=")[1]))
                print(f"{label}: median {statistics.median(times):.1f} ms, max {max(times):.1f}")


if __name__ == "__main__":
    main()
