"""Fleet size (issue 33 item 3): 1, 10 and 50 daemons (`--concurrency 1` each) on one server,
idle and under 500 firings due within one second.

    .venv/bin/python bench/fleet_size.py [--sizes 1,10,50] [--idle-seconds 20] [--burst 500]

50 daemons hold about 200 connections (each: a pool of up to 2, its waker's LISTEN, its lease
keeper's), past PostgreSQL's default max_connections of 100: by default the script measures on
a server of its own (tests/owned_server.py: the machine's PostgreSQL binaries, a temporary data
directory, max_connections 400), `--database-url` names another.

For each size, in a database of its own, the daemons run under bench/counted.py (their counts
written every half second) and the figures are differences over a window:
- idle: the database's transactions/s (`pg_stat_database`), in all and per daemon, and the
  claims/s the daemons sent, with no task due;
- burst: `--burst` one-shot in-process tasks running bench.noop:record, due spread over one
  second three seconds after they are added: claim attempts (statements calling
  `sd_claim_launch_*`) per started job; wake-ups heard per wake-up sent (each daemon's waker
  hears every NOTIFY of the channel, so the sum heard over the most any one daemon heard); each
  claim's round trip p50/p99 (it holds the budget's advisory lock for its statement, so its
  wait on that lock is the round trip beyond the 1-daemon figure); start lag p50/p99 from the
  jobs' own records.
"""

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import noop
from bench.harness import (
    Workdir,
    compile_sources,
    drop_database,
    fresh_database,
    percentile,
    processes,
    sql,
    wait_until,
    xacts,
)

DATABASE = "sd_bench_fleet"


def counts(work: Workdir) -> dict[str, Any]:
    """The daemons' live counts, summed, with every claim's seconds and each one's wake-ups."""
    total: dict[str, Any] = {"claims": 0, "wakeups": 0, "claim_seconds": [], "per_daemon": []}
    for f in work.counts.glob("*.json"):
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        total["claims"] += data["claims"]
        total["wakeups"] += data["wakeups"]
        total["claim_seconds"] += data["claim_seconds"]
        total["per_daemon"].append(data["wakeups"])
    return total


def settled(work: Workdir, url: str) -> tuple[dict[str, Any], int]:
    """Counts and transactions once both have been flushed (counts every 0.5 s, the server's
    counters within a second)."""
    time.sleep(1.2)
    return counts(work), xacts(url)


def measure(server: str, size: int, idle_seconds: float, burst: int) -> dict[str, Any]:
    from scheduler_daemon.client import Client
    from scheduler_daemon.domain.task import TaskSpec

    url = fresh_database(server, DATABASE)
    work = Workdir()
    try:
        with Client(url) as client:
            client.set_fleet_setting("max-concurrent-runs", "100000", updated_by="bench")
        with processes() as procs:
            for i in range(size):
                procs.daemon(url, work, f"fleet-{i}", "--concurrency", "1")
            wait_until(
                lambda: len(sql(url, "SELECT id FROM instance")) == size, 120, f"{size} daemons"
            )
            time.sleep(3.0)  # first passes, registrations and LISTEN probes out of the window
            statements = _statements_reset(url)
            before, xact_before = settled(work, url)
            began = time.monotonic()
            time.sleep(idle_seconds)
            after, xact_after = settled(work, url)
            idle = time.monotonic() - began
            idle_top = _statements(url, idle * size) if statements else []
            idle_xacts = (xact_after - xact_before) / idle
            idle_claims = (after["claims"] - before["claims"]) / idle

            due = datetime.now(UTC) + timedelta(seconds=3)
            with Client(url) as client:
                client.add_tasks(
                    TaskSpec(
                        name=f"burst-{i}",
                        executor="python",
                        target="bench.noop:record",
                        at=due + timedelta(seconds=i / burst),
                        in_process=True,
                    )
                    for i in range(burst)
                )
            wait_until(lambda: noop.count(work.record) >= burst, 300, "the burst's jobs")
            done, _ = settled(work, url)
        rows = noop.read(work.record)
        lags = [(start - d) * 1000 for _, d, start, _ in rows if d is not None]
        claim_ms = [s * 1000 for s in done["claim_seconds"][len(after["claim_seconds"]) :]]
        heard = done["per_daemon"]
        return {
            "daemons": size,
            "idle_xacts_s": idle_xacts,
            "idle_xacts_s_per_daemon": idle_xacts / size,
            "idle_claims_s": idle_claims,
            "burst_jobs": len(rows),
            "claims": done["claims"] - after["claims"],
            "claims_per_job": (done["claims"] - after["claims"]) / max(1, len(rows)),
            "woken_per_notify": sum(heard) / max(1, max(heard, default=0)),
            "claim_ms_p50": percentile(claim_ms, 50),
            "claim_ms_p99": percentile(claim_ms, 99),
            "lag_ms_p50": percentile(lags, 50),
            "lag_ms_p99": percentile(lags, 99),
            "idle_statements": idle_top,
        }
    finally:
        work.remove()
        drop_database(server, DATABASE)


def _statements_reset(url: str) -> bool:
    """Resets pg_stat_statements where the server loads it (a server of this run's own)."""
    try:
        sql(url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        sql(url, "SELECT pg_stat_statements_reset()")
    except Exception:
        return False
    return True


def _statements(url: str, daemon_seconds: float) -> list[tuple[float, str]]:
    """The idle window's most called statements: (calls per daemon per second, its start)."""
    rows = sql(
        url,
        "SELECT calls, regexp_replace(left(query, 70), '\\s+', ' ', 'g') AS q "
        "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
        "WHERE datname = current_database()) ORDER BY calls DESC LIMIT 8",
    )
    return [(r["calls"] / daemon_seconds, r["q"]) for r in rows]


@contextmanager
def own_server(url: str | None) -> Iterator[str]:
    """`url`, or a server of this run's own with room for 50 daemons' connections."""
    if url:
        yield url
        return
    from tests.owned_server import OwnedServer, find_bin_dir

    found = find_bin_dir()
    if found is None:
        raise SystemExit("no PostgreSQL server binaries here: pass --database-url")
    server = OwnedServer(*found).init()
    with open(server.data / "postgresql.auto.conf", "a", encoding="ascii") as conf:
        conf.write("max_connections = 400\nshared_buffers = '256MB'\n")
        conf.write("shared_preload_libraries = 'pg_stat_statements'\n")
    try:
        server.start()
        yield server.url
    finally:
        server.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="a server to measure on (default: one of its own)")
    parser.add_argument("--sizes", default="1,10,50")
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    os.environ["BENCH_COUNTS_LIVE"] = "1"
    compile_sources()
    with own_server(args.database_url) as server:
        results = [
            measure(server, int(n), args.idle_seconds, args.burst) for n in args.sizes.split(",")
        ]
    print(
        "| daemons | idle xact/s | per daemon | idle claims/s | claims per started job "
        "| woken per NOTIFY | claim ms p50 / p99 | start lag ms p50 / p99 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['daemons']} | {r['idle_xacts_s']:.1f} | {r['idle_xacts_s_per_daemon']:.2f} "
            f"| {r['idle_claims_s']:.2f} | {r['claims_per_job']:.2f} ({r['claims']} / "
            f"{r['burst_jobs']}) | {r['woken_per_notify']:.1f} "
            f"| {r['claim_ms_p50']:.1f} / {r['claim_ms_p99']:.1f} "
            f"| {r['lag_ms_p50']:.0f} / {r['lag_ms_p99']:.0f} |"
        )
    for r in results:
        print(f"\nidle statements, {r['daemons']} daemon(s): calls per daemon per second")
        for rate, text in r["idle_statements"]:
            print(f"  {rate:6.2f}  {text}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
