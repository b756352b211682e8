"""Throughput and start lag of real `scheduler-daemon run` processes with no-op python jobs.

Throughput: N manual occurrences of one `allow` python task (`bench.noop_job:noop`) are queued
first, then W daemons start; jobs/s = N / (last job end - first job start), from the jobs' own
records; transactions per occurrence from pg_stat_database.xact_commit before and after.
Latency (--lag): after a warm-up burst of jobs, one-shot tasks are added at R/s, each due 2 s
later; lag = job start wall time minus due time (same host, so the same clock).

    python bench/daemon_throughput.py --occurrences 3000 --daemons 1 3 [--lag --rate 50]
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from scheduler_daemon.storage import migration

SERVER = os.environ.get(
    "SCHEDULER_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
ROOT = Path(__file__).resolve().parent.parent
TARGET = "bench.noop_job:noop"


def database(name: str, tree: str | None = None, server: str = SERVER) -> str:
    """A fresh database on `server` at the schema head of `tree` (a checkout: its own `migrate`,
    so an older build's fleet runs on the schema it knows), or of this checkout."""
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    url = urlunsplit(urlsplit(server)._replace(path="/" + name))
    if tree is None:
        migration.upgrade(url)
    else:
        env = {**os.environ, "SCHEDULER_DATABASE_URL": url, "PYTHONPATH": tree}
        argv = [sys.executable, "-m", "scheduler_daemon", "migrate"]
        subprocess.run(argv, env=env, cwd=tree, check=True, stdout=subprocess.DEVNULL)
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE fleet_setting SET value = '100000' WHERE key = 'max_concurrent_runs'")
    return url


def seed(url: str, count: int, name: str = "bench", *, in_process: bool = False) -> None:
    """`count` queued manual occurrences of one `allow` python task running TARGET, in a worker
    process or `in_process` (on a daemon thread: ADR 0009)."""
    with psycopg.connect(url) as conn:
        (task,) = conn.execute(
            "INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload, overlap, "
            "next_run_at) VALUES (%s, 'interval', '1 hour', now(), 'python', "
            "jsonb_build_object('target', %s::text), 'allow', now() + interval '1 hour') "
            "RETURNING id",
            (name, TARGET),
        ).fetchone()
        if in_process:  # a separate statement: a tree older than the column seeds as before
            conn.execute("UPDATE task SET in_process = true WHERE id = %s", (task,))
        conn.execute(
            "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, "
            "status, not_before) SELECT %s, g, now(), 'manual', 'allow', 'queued', now() "
            "FROM generate_series(1, %s) g",
            (task, count),
        )
        conn.execute("UPDATE task SET occurrence_seq = %s WHERE id = %s", (count, task))


def xact_commit(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        return conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()[0]


def start_daemons(url: str, count: int, record: Path, extra: list[str]) -> list[subprocess.Popen]:
    env = {
        **os.environ,
        "SCHEDULER_DATABASE_URL": url,
        "SCHEDULER_BENCH_RECORD": str(record),
        "PYTHONPATH": str(ROOT),
    }
    argv = [sys.executable, "-m", "scheduler_daemon", "--log-format", "json", "run"]
    return [
        subprocess.Popen(
            [*argv, "--instance-id", f"bench{i}", *extra],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=open(os.environ["BENCH_LOG_DIR"] + f"/bench{i}.log", "w")
            if os.environ.get("BENCH_LOG_DIR")
            else subprocess.DEVNULL,
        )
        for i in range(count)
    ]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait(60)


def records(path: Path) -> list[tuple[int, float, float]]:
    if not path.exists():
        return []
    return [
        (int(a), float(b), float(c))
        for a, b, c in (line.split() for line in path.read_text().splitlines() if line)
    ]


def throughput(count: int, daemons: int, extra: list[str]) -> None:
    url = database("sd_bench_daemon")
    seed(url, count)
    record = Path(tempfile.mkdtemp()) / "jobs.txt"
    before = xact_commit(url)
    procs = start_daemons(url, daemons, record, extra)
    deadline = time.monotonic() + 600
    while len(records(record)) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    stop(procs)
    after = xact_commit(url)
    rows = records(record)
    assert len(rows) == count, (len(rows), count)
    first = min(r[1] for r in rows)
    last = max(r[2] for r in rows)
    print(
        f"daemons={daemons} occurrences={count} jobs/s={count / (last - first):,.0f} "
        f"xact_commit/occurrence={(after - before) / count:.2f} (incl. start/stop)"
    )


def lag(rate: float, seconds: float, daemons: int, extra: list[str]) -> None:
    url = database("sd_bench_lag")
    record = Path(tempfile.mkdtemp()) / "jobs.txt"
    procs = start_daemons(url, daemons, record, extra)
    # Warm up as a long-running fleet is: run a burst of jobs first, so every daemon has started
    # its python workers (cold starts take 0.3-1.5 s each on a busy host), then measure.
    # The burst is announced as the Client announces a trigger, so every daemon wakes and takes
    # a share; rounds repeat until each daemon ran at least --concurrency jobs (one that started
    # late, or was left out, would start cold workers in the measurement).
    concurrency = int(extra[extra.index("--concurrency") + 1])
    done = 0
    for round_ in range(10):
        seed(url, 3 * daemons * concurrency, f"warm{round_}")
        done += 3 * daemons * concurrency
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT pg_notify('scheduler_daemon_wakeup', 'triggered')")
        deadline = time.monotonic() + 120
        while len(records(record)) < done and time.monotonic() < deadline:
            time.sleep(0.2)
        with psycopg.connect(url) as conn:
            shares = [n for _, n in conn.execute("SELECT owner, count(*) FROM run GROUP BY owner")]
        if len(shares) == daemons and min(shares) >= concurrency:
            break
    time.sleep(3)  # the workers started after the burst come up too
    record.unlink()
    due: dict[str, datetime] = {}
    n = int(rate * seconds)
    with psycopg.connect(url, autocommit=True) as conn:
        t0 = time.monotonic()
        for i in range(n):
            at = datetime.now(UTC) + timedelta(seconds=2)
            (task_id,) = conn.execute(
                "INSERT INTO task (name, schedule_kind, run_at, anchor_at, executor, payload, "
                "overlap, next_run_at) VALUES (%s, 'once', %s, now(), 'python', "
                "jsonb_build_object('target', %s::text), 'allow', %s) RETURNING id",
                (f"lag{i}", at, TARGET, at),
            ).fetchone()
            # What Client.add_task sends: the wake-up carries the due time.
            conn.execute(
                "SELECT pg_notify('scheduler_daemon_wakeup', 'task_added ' || %s::text)",
                (at.isoformat(),),
            )
            due[task_id] = at
            time.sleep(max(0.0, t0 + (i + 1) / rate - time.monotonic()))
    deadline = time.monotonic() + 30
    while len(records(record)) < n and time.monotonic() < deadline:
        time.sleep(0.2)
    stop(procs)
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT r.id, o.task_id, extract(epoch FROM o.created_at)::float8, "
            "extract(epoch FROM r.started_at)::float8 "
            "FROM run r JOIN occurrence o ON o.id = r.occurrence_id"
        ).fetchall()
    run_task = {run_id: task_id for run_id, task_id, _, _ in rows}
    lags = sorted(
        (start - due[run_task[run_id]].timestamp()) * 1000 for run_id, start, _ in records(record)
    )
    if os.environ.get("BENCH_LAG_TRACE"):
        ordered = [
            round((start - due[run_task[run_id]].timestamp()) * 1000)
            for run_id, start, _ in sorted(records(record), key=lambda r: r[1])
        ]
        print("lags in start order (ms):", ordered[:: max(1, len(ordered) // 40)])
    q = statistics.quantiles(lags, n=100)
    print(
        f"lag daemons={daemons} rate={rate}/s firings={len(lags)}/{n}: "
        f"p50={q[49]:.1f} ms p99={q[98]:.1f} ms max={lags[-1]:.1f} ms"
    )
    print_stages(rows, due, records(record))


def print_stages(
    rows: list[tuple[int, int, float, float]],
    due: dict[int, datetime],
    jobs: list[tuple[int, float, float]],
) -> None:
    """Where the lag goes, per firing: the dispatch's transaction began (the occurrence's
    created_at is its now()), the claim's began (the run's started_at), the job started (its
    own record). `rows`: (run id, task id, created_at, started_at) as epoch seconds."""
    began = {row[0]: row[1:] for row in rows}
    stages: dict[str, list[float]] = {"due→dispatch": [], "dispatch→claim": [], "claim→job": []}
    for run_id, start, _ in jobs:
        if run_id not in began:
            continue
        task_id, dispatched, claimed = began[run_id]
        stages["due→dispatch"].append((dispatched - due[task_id].timestamp()) * 1000)
        stages["dispatch→claim"].append((claimed - dispatched) * 1000)
        stages["claim→job"].append((start - claimed) * 1000)
    for stage, values in stages.items():
        if len(values) >= 2:
            q = statistics.quantiles(values, n=100)
            print(f"  {stage}: p50={q[49]:.1f} ms p99={q[98]:.1f} ms max={max(values):.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--occurrences", type=int, default=3000)
    parser.add_argument("--daemons", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--lag", action="store_true")
    parser.add_argument("--rate", type=float, default=50)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--concurrency", default="10")
    args = parser.parse_args()
    extra = ["--concurrency", args.concurrency]
    for daemons in args.daemons:
        if args.lag:
            lag(args.rate, args.seconds, daemons, extra)
        else:
            throughput(args.occurrences, daemons, extra)


if __name__ == "__main__":
    main()
