"""Coordination throughput of the daemon's services beside pgbench on the same server, one run.

Seeds a queue of occurrences, then W in-process replicas (the real Launcher and Completer, each
with its own pool) claim, launch and complete them with an executor whose jobs finish at once, so
what is measured is the database coordination per occurrence: the budgeted claim, the launch
transaction and the fenced completion. Then pgbench runs its simple-update script with W clients
for the same length of time on the same server. Prints both rates and their ratio.

    python bench/claim_throughput.py [--occurrences 3000] [--replicas 4]
    (SCHEDULER_BENCH_DATABASE_URL: a server it may create databases on; default local 5432)
"""

import argparse
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from scheduler_daemon.domain.held import HeldRuns
from scheduler_daemon.executors.base import JobContext, Outcome
from scheduler_daemon.logconfig import configure
from scheduler_daemon.services.completer import Completer
from scheduler_daemon.services.launcher import Launcher
from scheduler_daemon.settings import DaemonSettings
from scheduler_daemon.storage import migration
from scheduler_daemon.storage.database import make_pool

SERVER = os.environ.get(
    "SCHEDULER_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


class DoneJob:
    def __init__(self, run_id: int) -> None:
        self.run_id = run_id

    def poll(self) -> Outcome:
        return Outcome("success", exit_code=0)

    def stop(self, reason: str) -> None: ...

    def extend(self, deadline: float) -> None: ...


class InstantExecutor:
    """Jobs that are finished as soon as they start: only coordination is measured."""

    kind = "shell"

    def start(self, ctx: JobContext, payload: Mapping[str, Any]) -> DoneJob:
        return DoneJob(ctx.run_id)

    def close(self) -> None: ...


def database(name: str) -> str:
    with psycopg.connect(SERVER, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return urlunsplit(urlsplit(SERVER)._replace(path="/" + name))


def seed(url: str, count: int) -> None:
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE fleet_setting SET value = '100000' WHERE key = 'max_concurrent_runs'")
        (task,) = conn.execute(
            "INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload, overlap) "
            "VALUES ('bench', 'interval', '1 hour', now(), 'shell', '{\"command\": \"true\"}', "
            "'allow') RETURNING id"
        ).fetchone()
        conn.execute(
            "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, "
            "status, not_before) SELECT %s, g, now(), 'manual', 'allow', 'queued', now() "
            "FROM generate_series(1, %s) g",
            (task, count),
        )
        conn.execute("UPDATE task SET occurrence_seq = %s", (count,))


def run_replicas(url: str, replicas: int) -> tuple[float, int]:
    settings = DaemonSettings(instance_prefix="bench", concurrency=20)
    executors = {"shell": InstantExecutor()}
    done = [0] * replicas

    def replica(index: int) -> None:
        pool = make_pool(url, max_size=1, name=f"bench-{index}")
        pool.open(wait=True)
        held = HeldRuns()
        launcher = Launcher(
            pool, instance_id=f"bench-{index}", settings=settings, held=held, executors=executors
        )  # type: ignore[dict-item]
        completer = Completer(pool, instance_id=f"bench-{index}", held=held, max_interruptions=3)
        while True:
            claimed = launcher.run_once().claimed
            done[index] += completer.run_once().done
            if not claimed and not len(held):
                break
        pool.close()

    threads = [threading.Thread(target=replica, args=(i,)) for i in range(replicas)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started, sum(done)


def pgbench_tps(url: str, clients: int, seconds: int) -> float:
    pgbench = shutil.which("pgbench") or next(
        (str(p) for p in sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"))), None
    )
    if pgbench is None:
        raise SystemExit("pgbench not found (Debian: postgresql-contrib / postgresql-client)")
    subprocess.run([pgbench, "-q", "-i", "-s", "1", url], check=True, capture_output=True)
    out = subprocess.run(
        [pgbench, "-N", "-c", str(clients), "-j", str(clients), "-T", str(seconds), url],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    match = re.search(r"tps = ([0-9.]+)", out)
    assert match, out
    return float(match[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--occurrences", type=int, default=3000)
    parser.add_argument("--replicas", type=int, default=4)
    args = parser.parse_args()
    configure("warning")  # measure the coordination, not the console
    url = database("sd_bench")
    migration.upgrade(url)
    seed(url, args.occurrences)
    elapsed, completed = run_replicas(url, args.replicas)
    assert completed == args.occurrences, (completed, args.occurrences)
    per_second = completed / elapsed
    tps = pgbench_tps(database("sd_bench_pgbench"), args.replicas, max(5, round(elapsed)))
    print(f"replicas={args.replicas} occurrences={completed} elapsed={elapsed:.2f}s")
    print(
        f"scheduler-daemon: {per_second:,.0f} occurrences/s, each a share of a budgeted claim and "
        "launch transaction and of a fenced completion transaction (batches)"
    )
    print(f"pgbench -N (simple update), same server, {args.replicas} clients: {tps:,.0f} tps")
    print(
        f"ratio: {per_second / tps:.3f} occurrences per pgbench transaction "
        f"({tps / per_second:.1f} pgbench transactions per occurrence)"
    )


if __name__ == "__main__":
    main()
