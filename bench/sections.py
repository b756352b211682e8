"""The measurements bench/run.py makes; each creates its own database(s) and drops them after."""

import asyncio
import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import noop
from bench.harness import (
    ROOT,
    Processes,
    Workdir,
    drop_database,
    fresh_database,
    noop_task,
    percentile,
    processes,
    seed_tasks,
    settled_xacts,
    sql,
    throughput,
    wait_until,
)


def _drain_queue(
    url: str,
    work: Workdir,
    jobs: int,
    start: Callable[[Processes], list[Any]],
    *,
    counted: bool = True,
) -> dict[str, Any]:
    """The `jobs` queued first, run by the workers `start` starts: jobs/s from the jobs' own
    records, the database's transactions before and after, and (`counted`: the workers run
    under bench/counted.py) their round trips."""
    before = settled_xacts(url)
    with processes() as procs:
        started = start(procs)
        wait_until(lambda: noop.count(work.record) >= jobs, 60 + jobs / 20, "the jobs")
        for proc in started:
            procs.stop(proc)
    done, rate = throughput(work.record)
    assert done == jobs, (done, jobs)
    after = settled_xacts(url)
    trips = work.round_trips() if counted else None
    return {
        "jobs_s": rate,
        "xacts_before": before,
        "xacts_after": after,
        "xacts_per_job": (after - before) / jobs,
        "round_trips": trips,
        "round_trips_per_job": None if trips is None else trips / jobs,
    }


# -- (a) our daemon: throughput, transactions and round trips per occurrence -----------------------
def ours_throughput(
    server: str, jobs: int, workers: int, concurrency: int, in_process: bool = False
) -> dict[str, float]:
    from scheduler_daemon.client import Client

    url = fresh_database(server, "sd_bench_ours")
    work = Workdir()
    try:
        noop_task(url, in_process=in_process)
        with Client(url) as client:
            for start in range(0, jobs, 100_000):
                client.trigger("noop", requested_by="bench", count=min(100_000, jobs - start))
        return _drain_queue(
            url,
            work,
            jobs,
            lambda procs: [
                procs.daemon(url, work, f"bench-{i}", "--concurrency", str(concurrency))
                for i in range(workers)
            ],
        )
    finally:
        work.remove()
        drop_database(server, "sd_bench_ours")


# -- (b) PgQueuer, same handler, same server ------------------------------------------------------
async def _pgq(url: str, work: Any) -> Any:
    import psycopg
    from pgqueuer import Queries
    from pgqueuer.db import PsycopgDriver

    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    try:
        return await work(Queries(PsycopgDriver(conn)))
    finally:
        await conn.close()


def pgq_database(server: str) -> str:
    url = fresh_database(server, "sd_bench_pgq", migrate=False)

    async def install(queries: Any) -> None:
        await queries.install()

    asyncio.run(_pgq(url, install))
    return url


def pgq_throughput(
    server: str, jobs: int, workers: int, batch: int, cap: int | None = None
) -> dict[str, float]:
    url = pgq_database(server)
    work = Workdir()
    try:

        async def enqueue(queries: Any) -> None:
            for start in range(0, jobs, 10_000):
                n = min(10_000, jobs - start)
                await queries.enqueue(["noop"] * n, [None] * n, [0] * n)

        asyncio.run(_pgq(url, enqueue))
        return _drain_queue(
            url,
            work,
            jobs,
            lambda procs: [
                procs.pgqueuer(url, work, f"pgq-{i}", batch, cap) for i in range(workers)
            ],
        )
    finally:
        work.remove()
        drop_database(server, "sd_bench_pgq")


# -- (k) awa (awa-pg), same handler, same server ---------------------------------------------------
def awa_database(server: str) -> str:
    """A database with awa's migrations, switched to its queue-storage engine: a fresh install
    enters it when its first runtime starts on the empty database, so one is started (and shut
    down) before anything is queued, as a deployment's first worker would."""
    import json

    import awa

    from bench.awa_worker import KIND, Noop

    url = fresh_database(server, "sd_bench_awa", migrate=False)

    async def install() -> None:
        await awa.migrate(url)
        client = awa.AsyncClient(url)
        try:
            client.task(Noop, kind=KIND)(noop.record_awa)
            await client.start()
            deadline = time.monotonic() + 30
            while json.loads(await client.storage_status())["active_engine"] != "queue_storage":
                assert time.monotonic() < deadline, "awa did not enter queue storage"
                await asyncio.sleep(0.1)
            await client.shutdown()
        finally:
            await client.close()

    asyncio.run(install())
    return url


def awa_throughput(server: str, jobs: int, workers: int) -> dict[str, float | None]:
    import awa

    from bench.awa_worker import KIND, Noop

    url = awa_database(server)
    work = Workdir()
    try:

        async def enqueue() -> None:
            client = awa.AsyncClient(url)
            try:
                for start in range(0, jobs, 10_000):  # its bulk path: COPY into queue storage
                    n = min(10_000, jobs - start)
                    await client.enqueue_many_copy([Noop() for _ in range(n)], kind=KIND)
            finally:
                await client.close()

        asyncio.run(enqueue())
        # awa's Rust client is not psycopg: its round trips are not counted.
        return _drain_queue(
            url,
            work,
            jobs,
            lambda procs: [procs.awa(url, work, f"awa-{i}") for i in range(workers)],
            counted=False,
        )
    finally:
        work.remove()
        drop_database(server, "sd_bench_awa")


# -- (c) pgbench: one job's life as the ceiling ---------------------------------------------------
def pgbench_binary() -> str:
    found = shutil.which("pgbench") or next(
        (str(p) for p in sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"))), None
    )
    if found is None:
        raise SystemExit("pgbench not found (Debian: postgresql-client)")
    return found


def pgbench_job_life(server: str, clients: int, seconds: int, script: str) -> float:
    """Jobs/s of bench/<script>.sql: pgbench's tps times the jobs one script run lives (1 for
    job_life, 10 for job_life_batch)."""
    url = fresh_database(server, "sd_bench_pgbench", migrate=False)
    try:
        sql(
            url,
            "CREATE TABLE bench_job (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
            "status text NOT NULL, token bigint NOT NULL DEFAULT 0, "
            "created_at timestamptz NOT NULL DEFAULT clock_timestamp(), "
            "started_at timestamptz, finished_at timestamptz)",
        )
        sql(url, "CREATE INDEX bench_job_queued_idx ON bench_job (id) WHERE status = 'queued'")
        path = str(ROOT / "bench" / f"{script}.sql")
        argv = [pgbench_binary(), "-n", "-c", str(clients), "-j", str(clients)]
        argv += ["-T", str(seconds), "-f", path, url]
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        match = re.search(r"tps = ([0-9.]+)", out)
        assert match, out
        return float(match[1]) * (10 if script == "job_life_batch" else 1)
    finally:
        drop_database(server, "sd_bench_pgbench")


# -- (d) scheduled start lag ----------------------------------------------------------------------
def _lag_summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p99": percentile(values, 99),
        "max": max(values, default=float("nan")),
    }


def ours_lag(
    server: str, rate: int, seconds: float, burst: int, in_process: bool = False
) -> dict[str, Any]:
    from scheduler_daemon.client import Client
    from scheduler_daemon.domain.task import TaskSpec

    url = fresh_database(server, "sd_bench_lag")
    work = Workdir()
    steady = int(rate * seconds)
    try:
        noop_task(url, in_process=in_process)
        with processes() as procs, Client(url) as client:
            for i in range(3):
                procs.daemon(url, work, f"lag-{i}", "--concurrency", "10")
            wait_until(lambda: len(sql(url, "SELECT id FROM instance")) == 3, 60, "3 daemons")
            client.trigger("noop", requested_by="warm-up", count=60)  # starts the python workers
            wait_until(lambda: noop.count(work.record) >= 60, 60, "the warm-up jobs")

            def one_shot(name: str, at: datetime) -> TaskSpec:
                return TaskSpec(
                    name=name,
                    executor="python",
                    target="bench.noop:record",
                    at=at,
                    in_process=in_process,
                )

            began = time.time()
            for i in range(steady):
                time.sleep(max(0.0, began + i / rate - time.time()))
                client.add_task(one_shot(f"lag-{i}", datetime.now(UTC) + timedelta(seconds=2)))
            burst_at = datetime.now(UTC) + timedelta(seconds=3)
            client.add_tasks(
                one_shot(f"burst-{i}", burst_at + timedelta(seconds=i / burst))
                for i in range(burst)
            )
            total = 60 + steady + burst
            wait_until(lambda: noop.count(work.record) >= total, 60, "the one-shot jobs")
        rows = noop.read(work.record)[60:]
        cut = burst_at.timestamp()
        steady_lags = [(s - d) * 1000 for _, d, s, _ in rows if d is not None and d < cut]
        burst_lags = [(s - d) * 1000 for _, d, s, _ in rows if d is not None and d >= cut]
        return {"steady": _lag_summary(steady_lags), "burst": _lag_summary(burst_lags)}
    finally:
        work.remove()
        drop_database(server, "sd_bench_lag")


def pgq_lag(server: str, rate: int, seconds: float, burst: int) -> dict[str, Any]:
    url = pgq_database(server)
    work = Workdir()
    steady = int(rate * seconds)
    try:
        with processes() as procs:
            for i in range(3):
                procs.pgqueuer(url, work, f"pgq-lag-{i}", 10)

            async def warm_up(queries: Any) -> None:
                await queries.enqueue(["noop"] * 60, [None] * 60, [0] * 60)

            asyncio.run(_pgq(url, warm_up))
            wait_until(lambda: noop.count(work.record) >= 60, 60, "the warm-up jobs")

            async def produce(queries: Any) -> float:
                began = time.time()
                for i in range(steady):
                    await asyncio.sleep(max(0.0, began + i / rate - time.time()))
                    await queries.enqueue("noop", None, execute_after=timedelta(seconds=2))
                cut = time.time() + 3
                after = [timedelta(seconds=3 + i / burst) for i in range(burst)]
                await queries.enqueue(["noop"] * burst, [None] * burst, [0] * burst, after)
                return cut

            cut = asyncio.run(_pgq(url, produce)) - 0.1  # enqueue ran after `cut` was taken
            total = 60 + steady + burst
            wait_until(lambda: noop.count(work.record) >= total, 90, "the deferred jobs")
        rows = noop.read(work.record)[60:]
        steady_lags = [(s - d) * 1000 for _, d, s, _ in rows if d is not None and d < cut]
        burst_lags = [(s - d) * 1000 for _, d, s, _ in rows if d is not None and d >= cut]
        return {"steady": _lag_summary(steady_lags), "burst": _lag_summary(burst_lags)}
    finally:
        work.remove()
        drop_database(server, "sd_bench_pgq")


# -- (e) takeover after SIGKILL at default settings, and what renewals cost ------------------------
def _sleep_task(url: str, budget: int) -> None:
    from scheduler_daemon.client import Client
    from scheduler_daemon.domain.task import TaskSpec

    with Client(url) as client:
        client.set_fleet_setting("max-concurrent-runs", str(budget), updated_by="bench")
        client.add_task(
            TaskSpec(
                name="sleeper",
                executor="shell",
                target="sleep 3600",
                every=timedelta(days=365),
                overlap="allow",
                paused=True,
            )
        )


def takeover(server: str, kills: int, gap: float) -> dict[str, Any]:
    from scheduler_daemon.client import Client
    from scheduler_daemon.settings import DaemonSettings

    url = fresh_database(server, "sd_bench_takeover")
    work = Workdir()
    try:
        _sleep_task(url, 1000)
        with processes() as procs, Client(url) as client:
            victims = {
                f"victim-{i}": procs.daemon(url, work, f"victim-{i}", "--concurrency", "1")
                for i in range(kills)
            }
            client.trigger("sleeper", requested_by="bench", count=kills)
            running = "SELECT owner FROM run WHERE status = 'running'"
            wait_until(lambda: len(sql(url, running)) == kills, 60, "one run per victim")
            procs.daemon(url, work, "rescuer", "--concurrency", str(kills))
            wait_until(
                lambda: sql(url, "SELECT 1 FROM instance WHERE id LIKE 'rescuer%%'"), 60, "rescuer"
            )
            owners = {r["owner"]: r["owner"].rsplit("-", 1)[0] for r in sql(url, running)}
            killed_at: dict[str, float] = {}
            for owner, prefix in sorted(owners.items()):
                victims[prefix].kill()  # SIGKILL: the daemon alone; its watchdog stays
                killed_at[owner] = time.time()
                time.sleep(gap)
            first_runs = "SELECT owner, finished_at FROM run WHERE owner = ANY(%s)"
            wait_until(
                lambda: all(r["finished_at"] for r in sql(url, first_runs, (list(owners),))),
                90,
                "every killed run to be taken over",
            )
            rows = sql(url, first_runs, (list(owners),))
        delays = [r["finished_at"].timestamp() - killed_at[r["owner"]] for r in rows]
        settings = DaemonSettings()
        return {
            "p50_s": percentile(delays, 50),
            "max_s": max(delays),
            "n": len(delays),
            "bound_s": settings.takeover_bound.total_seconds(),
        }
    finally:
        work.remove()
        drop_database(server, "sd_bench_takeover")


def renewals(server: str, running: int, window: float) -> dict[str, float]:
    """Lease renewals with `running` jobs held by 3 daemons at default settings, counted from the
    rows: every 0.25 s each running run's lease_expires_at is read, and each change is one
    renewed row; the changes of one owner seen in one poll are one renewal statement."""
    from scheduler_daemon.client import Client

    url = fresh_database(server, "sd_bench_renew")
    work = Workdir()
    try:
        _sleep_task(url, running + 10)
        with processes() as procs, Client(url) as client:
            per_daemon = running // 3 + 1
            for i in range(3):
                procs.daemon(url, work, f"renew-{i}", "--concurrency", str(per_daemon))
            client.trigger("sleeper", requested_by="bench", count=running)
            count = "SELECT count(*) AS n FROM run WHERE status = 'running'"
            wait_until(lambda: sql(url, count)[0]["n"] == running, 120, f"{running} runs")
            leases = "SELECT id, owner, lease_expires_at FROM run WHERE status = 'running'"
            seen = {r["id"]: r["lease_expires_at"] for r in sql(url, leases)}
            rows = statements = 0
            began = time.time()
            while time.time() - began < window:
                time.sleep(0.25)
                owners = set()
                for r in sql(url, leases):
                    if seen.get(r["id"]) not in (None, r["lease_expires_at"]):
                        rows += 1
                        owners.add(r["owner"])
                    seen[r["id"]] = r["lease_expires_at"]
                statements += len(owners)
            elapsed = time.time() - began
        return {
            "running": running,
            "renewed_rows_s_per_1000": rows / elapsed * 1000 / running,
            "renewal_statements_s": statements / elapsed,
        }
    finally:
        work.remove()
        drop_database(server, "sd_bench_renew")


# -- (g) the idle loop with many stored tasks -----------------------------------------------------
def _iteration_metric(port: int) -> tuple[float, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    found = {}
    for suffix in ("sum", "count"):
        match = re.search(rf"^\S*loop_iteration_seconds_{suffix}\S* ([0-9.e+-]+)$", text, re.M)
        assert match, text[:500]
        found[suffix] = float(match[1])
    return found["sum"], found["count"]


def idle_loop(server: str, stored: int, due: int, window: float, port: int) -> dict[str, float]:
    """Loop iteration time with `stored` tasks, `due` of them due and dispatched into queued
    occurrences that cannot start (the fleet budget of 1 is held by a sleeping job), so every
    pass scans the due tasks, the queue and the reconcile queries and finds nothing to do."""
    from scheduler_daemon.client import Client

    url = fresh_database(server, "sd_bench_idle")
    work = Workdir()
    try:
        seed_tasks(url, stored)
        _sleep_task(url, 1)
        with processes() as procs, Client(url) as client:
            procs.daemon(url, work, "idle", "--http-port", str(port))
            client.trigger("sleeper", requested_by="bench")
            running = "SELECT 1 FROM run WHERE status = 'running'"
            wait_until(lambda: sql(url, running), 60, "the job that holds the budget")
            sql(url, "UPDATE task SET next_run_at = now() WHERE id <= %s", (due,))
            queued = "SELECT count(*) AS n FROM occurrence WHERE status = 'queued'"
            wait_until(lambda: sql(url, queued)[0]["n"] == due, 60, f"{due} queued occurrences")
            time.sleep(1)
            sum0, count0 = _iteration_metric(port)
            time.sleep(window)
            sum1, count1 = _iteration_metric(port)
        iterations = count1 - count0
        return {
            "stored": stored,
            "iterations": iterations,
            "mean_ms": (sum1 - sum0) / iterations * 1000 if iterations else float("nan"),
        }
    finally:
        work.remove()
        drop_database(server, "sd_bench_idle")


# -- (h) the Python API ---------------------------------------------------------------------------
def client_figures(server: str, bulk: int, calls: int, counter: dict[str, int]) -> dict[str, float]:
    from scheduler_daemon.client import Client
    from scheduler_daemon.domain.task import TaskSpec

    url = fresh_database(server, "sd_bench_client")

    def spec(name: str) -> TaskSpec:
        return TaskSpec(name=name, executor="shell", target="true", every=timedelta(hours=1))

    def timed(f: Any) -> float:
        t = time.perf_counter()
        f()
        return time.perf_counter() - t

    try:
        with Client(url) as client:
            client.add_task(spec("t").with_changes(overlap="allow", paused=True))
            bulk_s = timed(lambda: client.trigger("t", requested_by="bench", count=bulk))
            tasks = [spec(f"bulk-{i}") for i in range(min(bulk, 10_000))]
            add_many_s = timed(lambda: client.add_tasks(tasks))
            for _ in range(20):
                client.trigger("t", requested_by="bench")
            before = counter["statements"] + counter["commands"]
            trigger = [timed(lambda: client.trigger("t", requested_by="b")) for _ in range(calls)]
            trips = (counter["statements"] + counter["commands"] - before) / calls
            before = counter["statements"] + counter["commands"]
            add = [timed(lambda i=i: client.add_task(spec(f"one-{i}"))) for i in range(calls)]
            add_trips = (counter["statements"] + counter["commands"] - before) / calls
        return {
            "bulk_occurrences_s": bulk / bulk_s,
            "add_tasks_s": len(tasks) / add_many_s,
            "trigger_p50_ms": percentile(trigger, 50) * 1000,
            "trigger_p99_ms": percentile(trigger, 99) * 1000,
            "trigger_round_trips": trips,
            "add_task_p50_ms": percentile(add, 50) * 1000,
            "add_task_p99_ms": percentile(add, 99) * 1000,
            "add_task_round_trips": add_trips,
        }
    finally:
        drop_database(server, "sd_bench_client")
