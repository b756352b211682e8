"""Two builds of the daemon at once: CPU per job of each, measured under the same host conditions.

    python bench/ab_cpu.py TREE_A TREE_B [--jobs 10000] [--daemons 3] [--repeat 3]
                           [--sql-b FILE]...

Each tree is a checkout (`git worktree add /tmp/base main`, say). Each gets a database of its own
with the same N queued no-op python jobs, and W daemons started from its tree, both fleets at
once; when both queues are done, it prints the CPU milliseconds per job of each fleet's daemons,
python workers and server backends (those of its database), and the ratio B/A; and each fleet's
jobs/s (its jobs over the span of their records), whose ratio shows a change that moves no CPU
but lets a fleet's daemons wait less for each other (a lock held for a shorter time). One fleet's
jobs/s moves by 10-30% from one minute to the next on a 2-core machine; the two fleets here share
every such minute, and a tree against itself measured B/A = 0.995-1.003. `--sql-b` runs a file in
B's database after migration (a diagnosis: a changed function, a dropped index).
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/ab_cpu.py`

from bench.daemon_throughput import SERVER, database, seed

TICK = os.sysconf("SC_CLK_TCK")


def _cpu_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime + stime


def _children(pid: int) -> list[int]:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        return [
            int(child)
            for task in tasks
            for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()
        ]
    except OSError:
        return []


def _done(record: Path) -> int:
    return record.read_bytes().count(b"\n") if record.exists() else 0


def _jobs_per_second(record: Path) -> float:
    """Jobs over the span from the first job's start to the last one's end (bench.noop_job's
    `run_id start end` lines)."""
    rows = [line.split() for line in record.read_text().splitlines() if line]
    span = max(float(end) for _, _, end in rows) - min(float(start) for _, start, _ in rows)
    return len(rows) / span


def one_sitting(
    trees: dict[str, str], jobs: int, daemons: int, sql_b: list[str]
) -> tuple[dict[str, float], dict[str, float]]:
    """CPU ms per job by group ("A daemons", "B server", ...), and jobs/s by fleet."""
    urls, records = {}, {}
    work = Path(tempfile.mkdtemp(prefix="sd_ab_"))
    for name, tree in trees.items():
        urls[name] = database(f"sd_ab_{name.lower()}", tree)
        seed(urls[name], jobs)
        records[name] = work / f"{name}.txt"
    with psycopg.connect(urls["B"], autocommit=True) as conn:
        for path in sql_b:
            conn.execute(Path(path).read_text())
    fleets: dict[str, list[subprocess.Popen[bytes]]] = {}
    for name, tree in trees.items():
        env = {
            **os.environ,
            "SCHEDULER_DATABASE_URL": urls[name],
            "SCHEDULER_BENCH_RECORD": str(records[name]),
            "PYTHONPATH": tree,
        }
        argv = [sys.executable, "-m", "scheduler_daemon", "--log-level", "warning", "run"]
        fleets[name] = [
            subprocess.Popen(
                [*argv, "--instance-id", f"{name}{i}", "--concurrency", "10"],
                env=env,
                cwd=tree,
                stdout=subprocess.DEVNULL,
                stderr=(work / f"{name}{i}.log").open("wb"),
            )
            for i in range(daemons)
        ]
    seen: dict[int, tuple[str, int]] = {}  # pid -> (group, the last CPU ticks read)

    def sample() -> None:
        with psycopg.connect(SERVER, autocommit=True) as conn:
            backends = conn.execute(
                "SELECT pid, datname FROM pg_stat_activity WHERE datname LIKE 'sd_ab_%'"
            ).fetchall()
        groups = [(pid, f"{db[-1].upper()} server") for pid, db in backends]
        for name, procs in fleets.items():
            for proc in procs:
                groups.append((proc.pid, f"{name} daemons"))
                groups += [(child, f"{name} workers") for child in _children(proc.pid)]
        for pid, group in groups:
            ticks = _cpu_ticks(pid)
            if ticks is not None:
                seen[pid] = (group, ticks)

    deadline = time.monotonic() + 120 + jobs / 100
    while any(_done(records[n]) < jobs for n in trees) and time.monotonic() < deadline:
        time.sleep(0.1)
        sample()
    sample()
    for procs in fleets.values():
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
    for procs in fleets.values():
        for proc in procs:
            proc.wait(60)
    for name in trees:
        ran = _done(records[name])
        assert ran >= jobs, f"fleet {name} ran {ran} of {jobs} (daemon logs: {work})"
    cost: dict[str, float] = {}
    for group, ticks in seen.values():
        cost[group] = cost.get(group, 0.0) + ticks * 1000 / TICK / jobs
    return cost, {name: _jobs_per_second(records[name]) for name in trees}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree_a")
    parser.add_argument("tree_b")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--daemons", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sql-b", action="append", default=[], help="run in B's database first")
    args = parser.parse_args()
    trees = {"A": os.path.abspath(args.tree_a), "B": os.path.abspath(args.tree_b)}
    ratios, speeds = [], []
    for _ in range(args.repeat):
        cost, rate = one_sitting(trees, args.jobs, args.daemons, args.sql_b)
        totals = {n: sum(v for k, v in cost.items() if k.startswith(n)) for n in trees}
        ratios.append(totals["B"] / totals["A"])
        speeds.append(rate["B"] / rate["A"])
        parts = [
            f"{n}: {totals[n]:.3f} ms/job (daemons {cost.get(f'{n} daemons', 0):.3f}, workers "
            f"{cost.get(f'{n} workers', 0):.3f}, server {cost.get(f'{n} server', 0):.3f})"
            for n in trees
        ]
        print(" | ".join(parts), f"| B/A {ratios[-1]:.3f}", flush=True)
        print(f"  jobs/s: A {rate['A']:,.0f}, B {rate['B']:,.0f}, B/A {speeds[-1]:.3f}", flush=True)
    print(f"CPU per job B/A, median of {len(ratios)}: {statistics.median(ratios):.3f}")
    print(f"jobs/s B/A, median of {len(speeds)}: {statistics.median(speeds):.3f}")


if __name__ == "__main__":
    main()
