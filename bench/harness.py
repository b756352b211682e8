"""What bench/run.py's sections share: databases of their own, daemon and worker processes, the
no-op task, the server's transaction counters, the counted round trips, percentiles."""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.rows import dict_row

from bench import noop

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


def with_database(server: str, name: str) -> str:
    return urlunsplit(urlsplit(server)._replace(path="/" + name))


def fresh_database(server: str, name: str, *, migrate: bool = True) -> str:
    """Drops and creates `name` on the server (bench_ databases only), migrated unless told."""
    assert name.startswith("sd_bench_"), name
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    url = with_database(server, name)
    if migrate:
        from scheduler_daemon.storage import migration

        migration.upgrade(url)
    return url


@contextmanager
def scratch_database(*, keep: bool = False) -> Iterator[str]:
    """A migrated database of a fresh `sd_bench_` name on $SCHEDULER_BENCH_DATABASE_URL's server
    (default the local one), for a script that plants its own data; dropped at the end unless
    `keep` (its URL is printed then)."""
    server = os.environ.get("SCHEDULER_BENCH_DATABASE_URL", DEFAULT_SERVER)
    name = f"sd_bench_{uuid.uuid4().hex[:8]}"
    url = fresh_database(server, name)
    try:
        yield url
    finally:
        if keep:
            print(f"kept: {url}")
        else:
            drop_database(server, name)


def plant_then_time(
    doc: str | None,
    plant: Callable[[str, int, int], None],
    timed: Callable[[str], None],
    *,
    tasks: int,
) -> None:
    """The command line of a script that plants a fleet in a scratch database, then times
    reads of it: --tasks (default `tasks`), --occurrences, --keep, and --reuse (time a
    database --keep left, no plant). `plant(url, tasks, occurrences)`; `timed(url)`."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=tasks)
    parser.add_argument("--occurrences", type=int, default=1_000_000)
    parser.add_argument("--keep", action="store_true", help="Keep the database; print its URL.")
    parser.add_argument("--reuse", metavar="URL", help="Time a database --keep left; no plant.")
    args = parser.parse_args()
    if args.reuse:
        timed(args.reuse)
        return
    with scratch_database(keep=args.keep) as url:
        started = time.perf_counter()
        plant(url, args.tasks, args.occurrences)
        print(f"planted in {time.perf_counter() - started:.0f} s")
        timed(url)


def median_ms(fn: Callable[[], Any], times: int = 5) -> float:
    """The median of `times` calls of `fn`, in milliseconds."""
    spent = []
    for _ in range(times):
        start = time.perf_counter()
        fn()
        spent.append(time.perf_counter() - start)
    return statistics.median(spent) * 1000


def drop_database(server: str, name: str) -> None:
    assert name.startswith("sd_bench_"), name
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def sql(url: str, statement: str, params: Any = None) -> list[dict[str, Any]]:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def xacts(url: str) -> int:
    """Committed plus rolled-back transactions of the database so far (pg_stat_database)."""
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(with_database(url, "postgres"), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        (n,) = conn.execute(  # type: ignore[misc]
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s", (name,)
        ).fetchone()
    return int(n)


def settled_xacts(url: str) -> int:
    """`xacts` once the backends have flushed their counters (they do so within a second)."""
    time.sleep(1.2)
    return xacts(url)


@dataclass
class Workdir:
    """A temporary folder with the record file and the round-trip counts of one measurement."""

    path: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="sd-bench-")))

    @property
    def record(self) -> str:
        return str(self.path / "record.txt")

    @property
    def counts(self) -> Path:
        (self.path / "counts").mkdir(exist_ok=True)
        return self.path / "counts"

    def round_trips(self) -> int:
        total = 0
        for f in self.counts.glob("*.json"):
            data = json.loads(f.read_text())
            total += data["statements"] + data["commands"]
        return total

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def environment(work: Workdir) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env[noop.RECORD_ENV] = work.record
    env["BENCH_COUNTS"] = str(work.counts)
    return env


PIN_ENV = "SCHEDULER_BENCH_PIN"


class Processes:
    """Processes this run started, each in its own session so that its children (python
    workers, the shell watchdog and its jobs) are ended with it at the end."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], work: Workdir, log: str) -> subprocess.Popen[bytes]:
        if os.environ.get(PIN_ENV):  # bench/run.py --pin: the n-th process on core n mod cores
            argv = ["taskset", "-c", str(len(self.procs) % (os.cpu_count() or 1)), *argv]
        with open(work.path / log, "wb") as out:
            proc = subprocess.Popen(
                argv,
                env=environment(work),
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def daemon(self, url: str, work: Workdir, name: str, *args: str) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "bench.counted", "scheduler-daemon"]
        argv += ["--database-url", url, "--log-level", "warning", "--log-format", "json"]
        return self.start([*argv, "run", "--instance-id", name, *args], work, f"{name}.log")

    def pgqueuer(
        self, url: str, work: Workdir, name: str, batch: int, cap: int | None = None
    ) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "bench.counted", "pgqueuer", url, str(batch)]
        argv += [] if cap is None else [str(cap)]
        return self.start(argv, work, f"{name}.log")

    def awa(self, url: str, work: Workdir, name: str) -> subprocess.Popen[bytes]:
        """An awa worker: not under bench.counted (awa talks to PostgreSQL from Rust, not psycopg,
        so its round trips are not counted; pg_stat_database's transactions still are)."""
        return self.start([sys.executable, "-m", "bench.awa_worker", url], work, f"{name}.log")

    def stop(self, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
        """SIGTERM, wait (the daemon drains and writes its counts), then end its session."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._end_session(proc)

    @staticmethod
    def _end_session(proc: subprocess.Popen[bytes]) -> None:
        with suppress(ProcessLookupError):  # its own session: the group is its children
            os.killpg(proc.pid, signal.SIGKILL)

    def stop_all(self) -> None:
        for proc in self.procs:
            self.stop(proc)
        self.procs.clear()


@contextmanager
def processes() -> Iterator[Processes]:
    procs = Processes()
    try:
        yield procs
    finally:
        procs.stop_all()


def wait_until(
    predicate: Callable[[], bool], timeout: float, what: str, poll: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(poll)


def noop_task(
    url: str, name: str = "noop", *, budget: int = 100_000, in_process: bool = False
) -> None:
    """One paused `allow` python-executor task running bench.noop:record (paused: no schedule
    fires; manual triggers still run), in a worker process or `in_process`, and a fleet budget
    that does not limit the benchmark."""
    from datetime import timedelta

    from scheduler_daemon.client import Client
    from scheduler_daemon.domain.task import TaskSpec

    with Client(url) as client:
        client.set_fleet_setting("max-concurrent-runs", str(budget), updated_by="bench")
        client.add_task(
            TaskSpec(
                name=name,
                executor="python",
                target="bench.noop:record",
                every=timedelta(days=365),
                overlap="allow",
                paused=True,
                in_process=in_process,
            )
        )


def compile_sources() -> None:
    """Byte-compiles this checkout's package and the benchmarks, as pip does for an installed
    wheel (PgQueuer's modules come compiled from its wheel). Where PYTHONDONTWRITEBYTECODE is
    set, as on this project's machines, an editable checkout is otherwise compiled again by
    every daemon and every python worker at each start, in the measured window."""
    import compileall

    for directory in ("scheduler_daemon", "bench"):
        compileall.compile_dir(ROOT / directory, quiet=1)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Of repeated runs of one measurement, the one with the median jobs/s (the lower middle
    of an even count), with every run's jobs/s beside it."""
    ordered = sorted(runs, key=lambda run: run["jobs_s"])
    middle = dict(ordered[(len(ordered) - 1) // 2])
    if len(runs) > 1:
        middle["jobs_s_runs"] = [run["jobs_s"] for run in runs]
    return middle


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def throughput(path: str) -> tuple[int, float]:
    """(jobs, jobs/s) from the jobs' own records: N / (last end - first start)."""
    rows = noop.read(path)
    if not rows:
        return 0, 0.0
    span = max(r[3] for r in rows) - min(r[2] for r in rows)
    return len(rows), len(rows) / span if span > 0 else float("inf")


BULK_TASKS = """
INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload, overlap,
    next_run_at, created_at, updated_at)
SELECT 'stored-' || g, 'interval', interval '1 day', now(), 'shell', '{"command": "true"}',
    'allow', now() + interval '1 day' + g * interval '1 ms', now(), now()
FROM generate_series(1, %s) g
"""


def seed_tasks(url: str, count: int) -> None:
    """`count` interval tasks due tomorrow, with bulk SQL (benchmark data only: the per-row
    audit trigger is skipped by running the insert as a replication session)."""
    with psycopg.connect(url) as conn:
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(BULK_TASKS, (count,))
    sql(url, "VACUUM ANALYZE task")


MINUTE_TASKS = """
INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload, next_run_at,
                  occurrence_seq)
SELECT 'task-' || lpad(g::text, 6, '0'), 'interval', '1 minute', now(), 'shell',
       '{"command": "true"}', now() + interval '1 minute', %(per)s
FROM generate_series(1, %(n)s) g"""


def plant_minute_tasks(conn: psycopg.Connection[Any], tasks: int, per: int) -> None:
    """`tasks` every-minute tasks named task-000001..., each with `per` occurrences' sequence
    numbers taken (the caller plants those occurrences)."""
    conn.execute(MINUTE_TASKS, {"n": tasks, "per": per})
