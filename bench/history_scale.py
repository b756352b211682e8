"""Issue 47's figures at scale, in one sitting: the hot path, the reads and retention over a big
history against a small one, on private clusters (nothing touches the shared server).

    python bench/history_scale.py                # 10,000,000 firings in 400 partitions
    python bench/history_scale.py --quick        # 200,000 in 40: a check in a few minutes

Two fleets of this tree, each on a private PostgreSQL 15 cluster of its own (bench/ab_cpu.py's
`--wal` clusters, on ports of their own): A with --base (10,000 ended firings in 4 dated
partitions), B with --rows ended firings in --partitions dated partitions of a day each
(bench/history_plant.py: 1,000 tasks, 10 of them kept ten years, and one whose only, so newest,
outcome is in the oldest partition), each with their runs. Then:

a. both fleets' daemon drains the same --jobs in-process no-op jobs at once (ab_cpu's sitting):
   CPU ms per job of the daemon and of the server, WAL per job after a CHECKPOINT, and B/A;
   then EXPLAIN (ANALYZE, BUFFERS) of the claim (`occurrence_claim_launch`) and the completion
   (`run_succeed_many`) in each, the plans of the statements their functions run (auto_explain),
   rolled back: buffers, and the dated partitions any plan names (it must name none: the hot
   path reads the default partitions alone).
c. the reads `tasks list` runs (`task_list`, its first page and every task) and the metrics
   sampler's per-task gauges (`task_metrics_sample`, `task_lost_firings`, JIT off as the sampler
   sets it) in each: median ms of --reads runs, and the buffers of one EXPLAIN ANALYZE; B/A.
b. in B, the oldest partition: the row-by-row DELETE of its rows (one statement per table,
   rolled back: the lower bound of `retention_prune`'s batches), then its DROP by the real
   upkeep (`sd_partitions_v1`, through its named statement) with the fleet's retention set just
   past it, so it keeps what it must (the long-retention tasks' rows, the stale task's newest
   outcome) and raises `task_pruned`: each after a CHECKPOINT, seconds and WAL bytes with the
   full-page images apart (pg_waldump). Without the upkeep in the tree, a bare DROP of the two
   partitions stands in (said so).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/<this>.py`

from bench import ab_cpu, fleet_cost, history_plant
from bench.daemon_throughput import seed
from bench.history_plant import (
    STALE_TASK,
    Plan,
    dated,
    interval_start,
    pair,
    plan_buffers,
    plant_statements,
    ratio,
    retention_past,
    statement_buffers,
)
from bench.model.price import Cluster, owner, tool, waldump

ROOT = Path(__file__).resolve().parent.parent
PORTS = {"A": 5494, "B": 5495}  # ab_cpu uses 5491-5493, bench/model 5498-5499
PREFIX = "sd_hist_pg_"


def plant(url: str, rows: int, partitions: int, *, tasks: int = 1000) -> None:
    """Plants `rows` ended firings in `partitions` dated partitions ending at the current
    interval's start (history_plant.plant_statements), in the database at `url`."""
    plan = Plan(rows, partitions, tasks=tasks)
    with psycopg.connect(url, autocommit=True) as conn:
        ((partitioned, firing_key, id_base, run_base, now),) = conn.execute(
            "SELECT EXISTS (SELECT FROM pg_partitioned_table "
            "WHERE partrelid = 'occurrence'::regclass), to_regclass('firing_key') IS NOT NULL, "
            "(SELECT coalesce(max(id), 0) FROM occurrence), "
            "(SELECT coalesce(max(id), 0) FROM run), "
            "now()"
        ).fetchall()
        conn.execute("SET maintenance_work_mem = '256MB'")
        end = interval_start(now, plan.interval)
        for statement in plant_statements(
            plan,
            end,
            partitioned=partitioned,
            id_base=id_base,
            run_base=run_base,
            firing_key=firing_key,
        ):
            conn.execute(statement)


def _auto_explained(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> list[str]:
    """The analyzed plans (one text each) of the statements the named query runs, its
    functions' included (auto_explain), in a transaction rolled back."""
    from scheduler_daemon.storage.query import QUERIES

    plans: list[str] = []

    def keep(diagnostic: psycopg.errors.Diagnostic) -> None:
        text = diagnostic.message_primary or ""
        if "plan:" in text:
            plans.append(text.split("plan:\n", 1)[1])

    conn.execute("LOAD 'auto_explain'")
    for setting in ("log_min_duration = 0", "log_nested_statements = on", "log_analyze = on"):
        conn.execute(f"SET auto_explain.{setting}")
    for setting in ("log_buffers = on", "log_timing = off", "log_level = notice"):
        conn.execute(f"SET auto_explain.{setting}")
    conn.add_notice_handler(keep)
    try:
        with conn.transaction(force_rollback=True):
            psycopg.ClientCursor(conn).execute(QUERIES[name].sql, params)
    finally:
        conn.remove_notice_handler(keep)
        conn.execute("RESET auto_explain.log_min_duration")
    return plans


def hot_path(fleet: ab_cpu.Fleet) -> dict[str, tuple[int, list[str]]]:
    """The claim's and the completion's buffers (every statement they run) and the dated
    partitions their plans name, in `fleet`'s database: 20 jobs queued, claimed for real (the
    completion's rows), the claim explained again over the rest, the completion explained."""
    from scheduler_daemon.storage import migration, occurrence_store

    seed(fleet.url, 40, name="explain", in_process=True)
    name, params = occurrence_store.claim_launch_statement(
        owner="explain",
        slots=20,
        ttl=timedelta(seconds=60),
        grace=timedelta(seconds=10),
        known=migration.known_revisions(),
    )
    out = {}
    with psycopg.connect(fleet.url, autocommit=True, row_factory=dict_row) as conn:
        from scheduler_daemon.storage.query import QUERIES

        rows = [r for r in conn.execute(QUERIES[name].sql, params).fetchall() if r["id"]]
        plans = _auto_explained(conn, name, params)
        out["claim"] = (sum(statement_buffers(p) for p in plans), dated(plans))
        ordered = sorted(rows, key=lambda r: r["run_id"])
        done = {
            "ids": [r["run_id"] for r in ordered],
            "tokens": [r["lease_token"] for r in ordered],
            "exit_codes": [0] * len(ordered),
            "http_statuses": [None] * len(ordered),
            "output_tails": [None] * len(ordered),
            "errors": [None] * len(ordered),
            "occurrence_ids": [r["id"] for r in ordered],
            "task_ids": sorted({r["task_id"] for r in ordered}),
            "owner": "explain",
            "channel": "bench_explain",
            "wake": False,
            "now": None,
        }
        plans = _auto_explained(conn, "run_succeed_many", done)
        out[f"completion of {len(ordered)}"] = (
            sum(statement_buffers(p) for p in plans),
            dated(plans),
        )
    return out


# The reads of `tasks list` (its first page, as the CLI asks for it, and every task) and of the
# metrics sampler (storage/task_sample.py: JIT off, both statements at the default task limit).
READS = (
    ("tasks list, first page", "task_list", {"limit": 101}, False),
    ("tasks list, every task", "task_list", {"limit": None}, False),
    ("gauges: task_metrics_sample", "task_metrics_sample", {}, True),
    ("gauges: task_lost_firings", "task_lost_firings", {}, True),
)


def reads(url: str, times: int) -> dict[str, tuple[float, int]]:
    """Each read's median ms over `times` runs (after one unmeasured) and its buffers."""
    from scheduler_daemon.storage import query, task_sample

    out = {}
    listing = {"after": None, "pattern": None, "status": None, "paused": None}
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn:
        for label, name, extra, jit_off in READS:
            params = {**listing, **task_sample.params(500), **extra}
            conn.execute(f"SET jit = {'off' if jit_off else 'DEFAULT'}")
            query.run(conn, name, params)
            spent = []
            for _ in range(times):
                start = time.perf_counter()
                query.run(conn, name, params)
                spent.append((time.perf_counter() - start) * 1000)
            ((plan,),) = conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query.QUERIES[name].sql, params
            ).fetchall()
            out[label] = (statistics.median(spent), plan_buffers(plan[0]))
    return out


def measured(cluster: Cluster, url: str, work: Callable[[psycopg.Connection[Any]], Any]) -> str:
    """`work` on a connection to `url` after a CHECKPOINT: wall seconds and WAL, full-page images
    apart (pg_waldump), and what `work` returned when it returned something."""
    cluster.psql("postgres", "CHECKPOINT")
    lsn0 = cluster.psql("postgres", "SELECT pg_current_wal_insert_lsn()")
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.monotonic()
        answer = work(conn)
        took = time.monotonic() - start
    lsn1 = cluster.psql("postgres", "SELECT pg_current_wal_insert_lsn()")
    kinds = waldump(cluster, lsn0, lsn1)
    total = fleet_cost.lsn_bytes(lsn1) - fleet_cost.lsn_bytes(lsn0)
    fpi = sum(v[2] for v in kinds.values())
    said = f"; {json.dumps(answer, default=str)}" if answer is not None else ""
    said += "\n       WAL by relation: " + ", ".join(
        f"{name} {nbytes:,} B" for name, nbytes in wal_by_relation(cluster, url, lsn0, lsn1)[:8]
    )
    return (
        f"{took:.3f} s, {total:,} B WAL of which {fpi:,} B full-page images "
        f"({total - fpi:,} without){said}"
    )


def wal_by_relation(cluster: Cluster, url: str, start: str, end: str) -> list[tuple[str, int]]:
    """WAL bytes (records and their images) between two LSNs by the relation of each record's
    first block, most first: relations dropped since are `dropped <filenode>`."""
    dump = [tool("pg_waldump"), "-p", str(cluster.datadir / "pg_wal"), "-s", start, "-e", end]
    out = subprocess.run(owner(dump), capture_output=True, text=True, check=False).stdout
    with psycopg.connect(url) as conn:
        names = dict(
            conn.execute(
                "SELECT pg_relation_filenode(oid)::text, relname FROM pg_class "
                "WHERE pg_relation_filenode(oid) IS NOT NULL"
            ).fetchall()
        )
    return history_plant.wal_by_relation(out, names)


def _oldest(conn: psycopg.Connection[Any]) -> tuple[str, str, Any, Any] | None:
    """The oldest dated partition of occurrence and of run, and their bounds."""
    row = conn.execute(
        "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
        "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'occurrence'::regclass "
        "AND c.relname ~ '^occurrence_p[0-9]{12}$' ORDER BY c.relname LIMIT 1"
    ).fetchone()
    if row is None:
        return None
    name, bound = row
    lo, hi = conn.execute(
        "SELECT %s::timestamptz, %s::timestamptz",
        tuple(bound.split("'")[i] for i in (1, 3)),
    ).fetchone()
    return name, "run_p" + name.removeprefix("occurrence_p"), lo, hi


def _day(conn: psycopg.Connection[Any], lo: Any, hi: Any) -> tuple[int, int, int]:
    """The firings and runs that ended in [lo, hi), and how many firings the keep rule keeps
    of them (a long-retention task's, the stale task's newest outcome)."""
    span = "finished_at >= %(lo)s AND finished_at < %(hi)s"
    ((firings, runs, keep),) = conn.execute(
        f"SELECT (SELECT count(*) FROM occurrence WHERE {span}), "  # noqa: S608
        f"(SELECT count(*) FROM run WHERE {span}), "
        "(SELECT count(*) FROM occurrence o JOIN task t ON t.id = o.task_id "
        f"WHERE o.{span} AND (t.history_retention IS NOT NULL OR t.name = %(stale)s))",
        {"lo": lo, "hi": hi, "stale": STALE_TASK},
    ).fetchall()
    return firings, runs, keep


def drop_against_delete(fleet: ab_cpu.Fleet) -> None:
    """b: the oldest partition's rows deleted row by row (rolled back), then dropped by the
    upkeep with the fleet's retention set just past that partition."""
    assert fleet.cluster is not None
    from scheduler_daemon.domain.duration import format_duration

    with psycopg.connect(fleet.url, autocommit=True) as conn:
        oldest = _oldest(conn)
        if oldest is None:
            print("  b: occurrence has no dated partition here: nothing to drop")
            return
        occurrence, run, lo, hi = oldest
        firings, runs, keep = _day(conn, lo, hi)
    print(f"  b: {occurrence} and {run}: {firings:,} firings, {runs:,} runs; {keep} to keep")

    def delete(conn: psycopg.Connection[Any]) -> None:
        with conn.transaction(force_rollback=True):
            for table in ("run", "occurrence"):
                conn.execute(
                    f"DELETE FROM {table} WHERE finished_at >= %s AND finished_at < %s",  # noqa: S608
                    (lo, hi),
                )

    deleted = measured(fleet.cluster, fleet.url, delete)
    print(f"  b: row-by-row DELETE of the day (rolled back): {deleted}")
    with psycopg.connect(fleet.url, autocommit=True) as conn:
        now = conn.execute("SELECT now()").fetchone()[0]
        retention = format_duration(retention_past(now, hi))
        conn.execute(
            "INSERT INTO fleet_setting (key, value, updated_at, updated_by) "
            "VALUES ('history_retention', to_jsonb(%s::text), now(), 'bench') "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (retention,),
        )
        marks0 = conn.execute("SELECT count(*) FROM task_pruned").fetchone()[0]
    try:
        from scheduler_daemon.storage import partition_store

        label = f"DROP by the upkeep (partition_store.upkeep, retention {retention})"

        def drop(conn: psycopg.Connection[Any]) -> Any:
            with conn.transaction():
                return partition_store.upkeep(conn)

    except ImportError:
        label = "bare DROP of both (no upkeep in this tree: nothing kept)"

        def drop(conn: psycopg.Connection[Any]) -> Any:
            with conn.transaction():
                conn.execute(f"DROP TABLE {run}")
                conn.execute(f"DROP TABLE {occurrence}")

    print(f"  b: {label}: {measured(fleet.cluster, fleet.url, drop)}")
    with psycopg.connect(fleet.url, autocommit=True) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_class WHERE relname IN (%s, %s)", (occurrence, run)
        ).fetchone()[0]
        kept, _, _ = _day(conn, lo, hi)
        marks = conn.execute("SELECT count(*) FROM task_pruned").fetchone()[0]
    print(
        f"  b: after it: {left} of the two partitions left, {kept} of the day's firings still "
        f"read through occurrence (of {keep} to keep), task_pruned marks {marks0} -> {marks}"
    )


def _report_reads(figures: dict[str, dict[str, tuple[float, int]]]) -> None:
    print("  c: read                         A ms     B ms    B/A   A buffers  B buffers   B/A")
    for label in figures["A"]:
        (ams, abuf), (bms, bbuf) = figures["A"][label], figures["B"][label]
        print(
            f"     {label:<28} {ams:7.2f}  {bms:7.2f}  {ratio(bms, ams):>5}  {abuf:9,}  "
            f"{bbuf:9,}  {ratio(bbuf, abuf):>5}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="B's ended firings")
    parser.add_argument("--partitions", type=int, default=400, help="B's dated partitions")
    parser.add_argument("--base", type=pair, default=(10_000, 4), metavar="ROWS,PARTITIONS")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs each fleet drains")
    parser.add_argument("--tasks", type=int, default=1000, help="planted tasks")
    parser.add_argument("--reads", type=int, default=9, help="runs of each read (median)")
    parser.add_argument("--quick", action="store_true", help="200,000 rows, 40 partitions")
    parser.add_argument("--keep", action="store_true", help="leave the clusters' data")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.partitions, args.jobs, args.reads = 200_000, 40, 2000, 5
    try:
        planted = pair(f"{args.rows},{args.partitions}")
    except argparse.ArgumentTypeError as exc:
        parser.error(f"--rows/--partitions: {exc}")
    sitting = argparse.Namespace(
        jobs=args.jobs,
        daemons=1,
        in_process=True,
        wal=True,
        plant_a=args.base,
        plant_b=planted,
        tasks=args.tasks,
        ports=PORTS,
        cluster_prefix=PREFIX,
    )
    trees: dict[str, str | None] = {"A": str(ROOT), "B": str(ROOT)}
    head = os.popen(f"git -C {ROOT} rev-parse --short HEAD").read().strip()  # noqa: S605
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')} at {head}: A {args.base[0]:,} firings in "
        f"{args.base[1]} partitions, B {args.rows:,} in {args.partitions}; {args.jobs:,} "
        f"in-process jobs each, 1 daemon; load average {fleet_cost.load_average()}",
        flush=True,
    )
    fleets: list[ab_cpu.Fleet] = []
    try:
        try:
            figures = ab_cpu.one_sitting(sitting, trees, fleets)
        except AssertionError as exc:  # a fleet did not drain: say so, measure the rest
            print(f"a: NOT MEASURED: {exc}", flush=True)
            _events(str(exc).rsplit("logs: ", 1)[-1].rstrip(")"))
            figures = {}
        if figures:
            _report_sitting(figures, trees)
        for fleet in fleets:
            for label, (buffers, parts) in hot_path(fleet).items():
                named = ", ".join(parts[:4]) + (" ..." if len(parts) > 4 else "") or "none"
                print(
                    f"  a: {fleet.name} {label}: {buffers:,} buffers; dated partitions in its "
                    f"plans: {len(parts)} ({named})",
                    flush=True,
                )
        _report_reads({f.name: reads(f.url, args.reads) for f in fleets})
        drop_against_delete(fleets[1])
        print(f"load average at end {fleet_cost.load_average()}")
    finally:
        for fleet in fleets:
            if fleet.cluster is not None and (fleet.cluster.datadir / "postmaster.pid").exists():
                fleet.cluster.stop()
                if not args.keep:
                    shutil.rmtree(fleet.cluster.datadir, ignore_errors=True)
    return 0


def _events(logs: str) -> None:
    """What each daemon logged, by event, when a fleet did not drain."""
    for log in sorted(Path(logs).glob("*.log")):
        counts: dict[str, int] = {}
        for line in log.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line).get("event", "?")
            except ValueError:
                event = "(not JSON)"
            counts[event] = counts.get(event, 0) + 1
        print(f"  {log.name}: {counts}", flush=True)


def _report_sitting(f: dict[str, float], trees: dict[str, str | None]) -> None:
    print("a: CPU and WAL per job, both fleets at once")
    ab_cpu.report(f, trees)
    print(
        f"  B/A (target <= 1.10): daemon CPU {ratio(f['B daemons'], f['A daemons'])} (from "
        f"the first job {ratio(f['B daemons steady'], f['A daemons steady'])}), server CPU "
        f"{ratio(f['B server'], f['A server'])} (from the first job "
        f"{ratio(f['B server steady'], f['A server steady'])}), WAL per job "
        f"{ratio(f['B wal_B'], f['A wal_B'])}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
