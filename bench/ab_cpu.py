"""Builds of the daemon side by side (or one alone): CPU and WAL per job, in one sitting.

    python bench/ab_cpu.py TREE_A [TREE_B] [--jobs 10000] [--daemons 3] [--repeat 3]
                           [--in-process] [--wal] [--pgqueuer] [--sql-b FILE]...

Each tree is a checkout (`git worktree add /tmp/base main`, say). Each gets a database of its own
with the same N queued no-op python jobs (`bench.noop_job:noop`, which both trees hold), and W
daemons started from its tree, every fleet at once; when every queue is done, it prints the CPU
milliseconds per job of each fleet's daemons, python workers and server, the same from its first
job on (the start-up left out), and the ratio B/A; and each fleet's jobs/s (its jobs over the span
of their records), whose ratio shows a change that moves no CPU but lets a fleet's daemons wait
less for each other. One fleet's jobs/s moves by 10-30% from one minute to the next on a 2-core
machine; the fleets here share every such minute, and a tree against itself measured B/A =
0.995-1.003. `--sql-b` runs a file in B's database after migration (a diagnosis), `--sql-a`
in A's; `--plant-a`/`--plant-b ROWS,PARTITIONS` plant that much ended history in that fleet's
database first (bench/history_plant.py), so one tree against itself gives the cost of its history
as B/A (issue 47: `bench/history_scale.py` runs it so, with the reads and the drop beside).

- Without TREE_B: one tree alone, for absolute figures (issue 48). The load average is printed at
  each sitting's start and end, with a warning when it is 1 or more at the start.
- `--in-process`: the task is `in_process` (ADR 0009): the no-op runs on a daemon thread, no
  worker process. Issue 48's figure, one daemon draining 20,000 in-process no-op jobs:
  `ab_cpu.py . --in-process --daemons 1 --jobs 20000 --wal --pgqueuer`.
- `--pgqueuer`: fleet P, one PgQueuer worker (bench/pgq_worker.py, batch 10, this checkout's
  pinned pgqueuer) draining the same N no-op jobs (bench.noop:record_pgqueuer) in the same sitting.
- `--wal`: each fleet on a private PostgreSQL 15 cluster of its own (bench/model/price.py's
  Cluster: the shared server's settings but no checkpoint and no autovacuum but ours), a
  CHECKPOINT just before its daemons start, and its WAL per job from the insert LSN and
  pg_stat_wal after the drain: bytes, full-page images apart (wal_fpi, and their bytes from
  pg_waldump), records. Server CPU is then every process of that cluster (background writers and
  exited backends included), not the sampled backends of one database.

Why private clusters rather than the fleets one after the other on the shared server with a
CHECKPOINT before each: the LSN and pg_stat_wal are the whole server's, and the shared server
carries other people's test databases, whose writes would land in any window (and a CHECKPOINT
there is paid by them). A cluster per fleet keeps the fleets side by side, so CPU stays
interleaved in one sitting, and each fleet's WAL counters hold its own writes alone.
"""

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/ab_cpu.py`

from bench import fleet_cost, history_plant
from bench.daemon_throughput import SERVER, database, seed
from bench.model.price import TMP, Cluster, waldump

TICK = os.sysconf("SC_CLK_TCK")
ROOT = Path(__file__).resolve().parent.parent
PORTS = {"A": 5491, "B": 5492, "P": 5493}  # bench/model/price.py uses 5499
CLUSTER_PREFIX = "sd_ab_pg_"  # each fleet's private cluster: $TMPDIR/sd_ab_pg_{a,b,p}
# The shared server's settings (128 MB of buffers, commits wait for the disk, no autovacuum),
# but no checkpoint other than the one before the drain.
SETTINGS = (
    "-c shared_buffers=128MB -c max_wal_size=100GB -c min_wal_size=2GB "
    "-c checkpoint_timeout=1d -c autovacuum=off"
)


@dataclass
class Fleet:
    name: str  # "A", "B" (our trees) or "P" (one PgQueuer worker)
    tree: str | None  # a checkout; None for PgQueuer, run from this checkout
    record: Path
    url: str = ""
    cluster: Cluster | None = None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    wal0: fleet_cost.WalReading | None = None
    cpu0: float = 0.0  # the cluster's CPU seconds when the daemons started
    at_first: dict[str, float] | None = None  # CPU ms by group when its first job started


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


def _datadir(name: str, prefix: str) -> Path:
    return Path(TMP) / f"{prefix}{name.lower()}"


def _server(fleet: Fleet, args: argparse.Namespace) -> str:
    if not args.wal:
        return SERVER
    ports = getattr(args, "ports", PORTS)
    datadir = _datadir(fleet.name, getattr(args, "cluster_prefix", CLUSTER_PREFIX))
    fleet.cluster = Cluster(datadir, ports[fleet.name], SETTINGS)
    fleet.cluster.start()
    return f"postgresql://postgres@/postgres?host={TMP}&port={ports[fleet.name]}"


def _pgqueuer_database(server: str, name: str, jobs: int) -> str:
    """A database with PgQueuer installed and `jobs` no-op jobs queued (its batch enqueue)."""
    from bench.sections import _pgq

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    url = urlunsplit(urlsplit(server)._replace(path="/" + name))

    async def fill(queries: Any) -> None:
        await queries.install()
        for start in range(0, jobs, 10_000):
            n = min(10_000, jobs - start)
            await queries.enqueue(["noop"] * n, [None] * n, [0] * n)

    asyncio.run(_pgq(url, fill))
    return url


def _prepare(fleet: Fleet, args: argparse.Namespace) -> None:
    server = _server(fleet, args)
    name = f"sd_ab_{fleet.name.lower()}"
    if fleet.tree is None:
        fleet.url = _pgqueuer_database(server, name, args.jobs)
        return
    fleet.url = database(name, fleet.tree, server)
    seed(fleet.url, args.jobs, in_process=args.in_process)
    planted = getattr(args, f"plant_{fleet.name.lower()}", None)
    if planted:
        from bench.history_scale import plant  # only where history is planted

        start = time.monotonic()
        plant(fleet.url, *planted, tasks=getattr(args, "tasks", 1000))
        print(
            f"  {fleet.name}: planted {planted[0]:,} ended firings in {planted[1]} partitions "
            f"in {time.monotonic() - start:.0f} s",
            flush=True,
        )
    for path in getattr(args, f"sql_{fleet.name.lower()}", None) or []:
        with psycopg.connect(fleet.url, autocommit=True) as conn:
            conn.execute(Path(path).read_text())


def _wal_reading(cluster: Cluster) -> fleet_cost.WalReading:
    row = cluster.psql(
        "postgres", "SELECT pg_current_wal_insert_lsn(), wal_records, wal_fpi FROM pg_stat_wal"
    )
    lsn, records, fpi = row.split("|")
    return fleet_cost.WalReading(lsn, int(records), int(fpi))


def _mark(fleets: list[Fleet]) -> None:
    """A CHECKPOINT in each private cluster, then its WAL counters and CPU before the drain
    (all of them before any fleet starts: no fleet drains while another is being marked)."""
    clusters = [f.cluster for f in fleets if f.cluster is not None]
    for cluster in clusters:
        cluster.psql("postgres", "CHECKPOINT")
    if clusters:
        time.sleep(1.5)  # pg_stat_wal: the setup's backends have flushed their counters
    for fleet in fleets:
        if fleet.cluster is not None:
            fleet.wal0 = _wal_reading(fleet.cluster)
            fleet.cpu0 = fleet.cluster.cpu_seconds()


def _start(fleet: Fleet, daemons: int, work: Path) -> None:
    tree = fleet.tree or str(ROOT)
    env = {
        **os.environ,
        "SCHEDULER_DATABASE_URL": fleet.url,
        "SCHEDULER_BENCH_RECORD": str(fleet.record),  # bench.noop_job
        "BENCH_RECORD": str(fleet.record),  # bench.noop (PgQueuer's handler)
        "PYTHONPATH": tree,
    }
    if fleet.tree is None:
        argvs = [[sys.executable, "-m", "bench.pgq_worker", fleet.url, "10"]]
    else:
        argv = [sys.executable, "-m", "scheduler_daemon", "--log-level", "warning", "run"]
        argvs = [
            [*argv, "--instance-id", f"{fleet.name}{i}", "--concurrency", "10"]
            for i in range(daemons)
        ]
    for i, argv in enumerate(argvs):
        log = (work / f"{fleet.name}{i}.log").open("wb")
        fleet.procs.append(
            subprocess.Popen(argv, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=log)
        )


class Sampler:
    """The CPU ticks last read of every process of the fleets (pid -> (group, ticks)); a process
    that exits keeps its last reading, so a sample every 0.1 s loses at most 0.1 s of each."""

    def __init__(self, fleets: list[Fleet]) -> None:
        self.fleets = fleets
        self.seen: dict[int, tuple[str, int]] = {}

    def sample(self) -> None:
        groups = []
        if not any(f.cluster for f in self.fleets):  # the shared server: each database's backends
            with psycopg.connect(SERVER, autocommit=True) as conn:
                backends = conn.execute(
                    "SELECT pid, datname FROM pg_stat_activity WHERE datname LIKE 'sd_ab_%'"
                ).fetchall()
            groups = [(pid, f"{db[-1].upper()} server") for pid, db in backends]
        for fleet in self.fleets:
            for proc in fleet.procs:
                groups.append((proc.pid, f"{fleet.name} daemons"))
                groups += [(child, f"{fleet.name} workers") for child in _children(proc.pid)]
        for pid, group in groups:
            ticks = _cpu_ticks(pid)
            if ticks is not None:
                self.seen[pid] = (group, ticks)

    def totals(self, fleet: Fleet) -> dict[str, float]:
        """CPU ms by group of `fleet` so far (its cluster's whole CPU as its server's)."""
        out = {f"{fleet.name} {g}": 0.0 for g in ("daemons", "workers", "server")}
        for group, ticks in self.seen.values():
            if group in out:
                out[group] += ticks * 1000 / TICK
        if fleet.cluster is not None:
            out[f"{fleet.name} server"] = (fleet.cluster.cpu_seconds() - fleet.cpu0) * 1000
        return out


def _drain(fleets: list[Fleet], jobs: int, work: Path) -> dict[str, dict[str, float]]:
    """Waits until every fleet ran its jobs; CPU ms by group of each, whole and from the first
    job on."""
    sampler = Sampler(fleets)
    deadline = time.monotonic() + 120 + jobs / 100
    while any(_done(f.record) < jobs for f in fleets) and time.monotonic() < deadline:
        time.sleep(0.1)
        sampler.sample()
        for fleet in fleets:
            if fleet.at_first is None and _done(fleet.record):
                fleet.at_first = sampler.totals(fleet)
    sampler.sample()
    _stop(fleets)
    time.sleep(0.3)  # the clusters' backends reaped into their postmaster's cutime
    out = {}
    for fleet in fleets:
        ran = _done(fleet.record)
        assert ran >= jobs, f"fleet {fleet.name} ran {ran} of {jobs} (logs: {work})"
        total = sampler.totals(fleet)
        out["whole"] = {**out.get("whole", {}), **total}
        out["steady"] = {**out.get("steady", {}), **fleet_cost.since(total, fleet.at_first or {})}
    return out


def _stop(fleets: list[Fleet]) -> None:
    for fleet in fleets:
        for proc in fleet.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
    for fleet in fleets:
        for proc in fleet.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wal(fleet: Fleet, jobs: int) -> dict[str, float]:
    assert fleet.cluster is not None
    assert fleet.wal0 is not None
    time.sleep(1.5)  # pg_stat_wal: the backends flushed their counters as they exited
    after = _wal_reading(fleet.cluster)
    kinds = waldump(fleet.cluster, fleet.wal0.lsn, after.lsn)
    fpi_bytes = sum(v[2] for v in kinds.values())
    print(f"  {fleet.name} WAL by record kind, per job: {fleet_cost.top_kinds(kinds, jobs)}")
    return fleet_cost.wal_per_job(fleet.wal0, after, fpi_bytes, jobs)


def one_sitting(
    args: argparse.Namespace, trees: dict[str, str | None], kept: list[Fleet] | None = None
) -> dict[str, float]:
    """Figures of one sitting by name ("A daemons", "A server steady", "A jobs/s", "A wal_B"...).
    `kept` receives the fleets (their databases, and clusters left running, for reads after)."""
    work = Path(tempfile.mkdtemp(prefix="sd_ab_"))
    fleets = [Fleet(name, tree, work / f"{name}.txt") for name, tree in trees.items()]
    if kept is not None:
        kept.extend(fleets)
    for fleet in fleets:
        _prepare(fleet, args)
    _mark(fleets)
    try:
        for fleet in fleets:
            _start(fleet, args.daemons, work)
        cpu = _drain(fleets, args.jobs, work)
    finally:
        _stop(fleets)
    figures = {k: v / args.jobs for k, v in cpu["whole"].items()}
    figures |= {f"{k} steady": v / args.jobs for k, v in cpu["steady"].items()}
    for fleet in fleets:
        figures[f"{fleet.name} jobs/s"] = fleet_cost.jobs_per_second(fleet.record.read_text())
        if fleet.cluster is not None:
            wal = _wal(fleet, args.jobs)
            figures |= {f"{fleet.name} {k}": v for k, v in wal.items()}
    return figures


def report(figures: dict[str, float], trees: dict[str, str | None]) -> None:
    label = {"A": "A", "B": "B", "P": "P (PgQueuer, 1 worker)"}
    word = {"A": "daemons", "B": "daemons", "P": "worker"}
    for n in trees:
        f = figures.get
        total = sum(f(f"{n} {g}", 0.0) for g in ("daemons", "workers", "server"))
        print(
            f"  {label[n]}: {total:.3f} ms/job ({word[n]} {f(f'{n} daemons', 0):.3f}, workers "
            f"{f(f'{n} workers', 0):.3f}, server {f(f'{n} server', 0):.3f}); from the first "
            f"job: {word[n]} {f(f'{n} daemons steady', 0):.3f}, workers "
            f"{f(f'{n} workers steady', 0):.3f}, server {f(f'{n} server steady', 0):.3f}; "
            f"{f(f'{n} jobs/s', 0):,.0f} jobs/s",
            flush=True,
        )
        if f"{n} wal_B" in figures:
            print(
                f"     WAL {f(f'{n} wal_B'):,.0f} B/job: {f(f'{n} wal_noFPI_B'):,.0f} without "
                f"full-page images, {f(f'{n} fpi'):.3f} images/job = {f(f'{n} fpi_B'):,.0f} "
                f"B/job; {f(f'{n} records'):.1f} records/job",
                flush=True,
            )
    ours = [n for n in trees if n != "P"]
    if "B" in trees:
        print(
            f"  B/A: CPU {_total(figures, 'B') / _total(figures, 'A'):.3f}, jobs/s "
            f"{figures['B jobs/s'] / figures['A jobs/s']:.3f}",
            flush=True,
        )
    if "P" in trees:
        for n in ours:
            print(
                f"  {n}/PgQueuer: server CPU {figures[f'{n} server'] / figures['P server']:.3f} "
                f"(from the first job {_ratio(figures, n, 'P', 'server steady'):.3f}), "
                f"all CPU {_total(figures, n) / _total(figures, 'P'):.3f}",
                flush=True,
            )


def _ratio(figures: dict[str, float], a: str, b: str, group: str) -> float:
    return figures[f"{a} {group}"] / figures[f"{b} {group}"]


def _total(figures: dict[str, float], n: str) -> float:
    return sum(figures.get(f"{n} {g}", 0.0) for g in ("daemons", "workers", "server"))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("tree_a")
    parser.add_argument("tree_b", nargs="?", help="omitted: tree A alone (absolute figures)")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--daemons", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--in-process", action="store_true", help="the task runs in-process")
    parser.add_argument("--wal", action="store_true", help="a private cluster per fleet: WAL")
    parser.add_argument("--pgqueuer", action="store_true", help="one PgQueuer worker beside")
    parser.add_argument("--sql-a", action="append", default=[], help="run in A's database first")
    parser.add_argument("--sql-b", action="append", default=[], help="run in B's database first")
    for name in ("a", "b"):
        parser.add_argument(
            f"--plant-{name}",
            type=history_plant.pair,
            metavar="ROWS,PARTITIONS",
            help=f"plant ended history in {name.upper()}'s database first",
        )
    args = parser.parse_args()
    trees: dict[str, str | None] = {"A": os.path.abspath(args.tree_a)}
    if args.tree_b:
        trees["B"] = os.path.abspath(args.tree_b)
    if args.pgqueuer:
        trees["P"] = None
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}: {args.jobs} jobs, {args.daemons} daemon(s)"
        f", {'in-process' if args.in_process else 'python worker processes'}",
        flush=True,
    )
    sittings = []
    try:
        for i in range(args.repeat):
            load = fleet_cost.load_average()
            print(f"sitting {i + 1}: load average at start {load}", flush=True)
            if warning := fleet_cost.quiet_warning(load):
                print(f"  {warning}", flush=True)
            sittings.append(one_sitting(args, trees))
            report(sittings[-1], trees)
            print(f"  load average at end {fleet_cost.load_average()}", flush=True)
    finally:
        if args.wal:
            for name in trees:
                datadir = _datadir(name, CLUSTER_PREFIX)
                if (datadir / "postmaster.pid").exists():
                    Cluster(datadir, PORTS[name], SETTINGS).stop()
    if len(sittings) > 1:
        print(f"median of {len(sittings)} sittings:")
        report(fleet_cost.medians(sittings), trees)


if __name__ == "__main__":
    main()
