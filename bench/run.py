"""scheduler-daemon beside PgQueuer and pgbench, on one server, in one sitting; prints each figure
and the ratios (issue 11). Needs `pip install -e '.[bench]'` and PostgreSQL's `pgbench`.

    python bench/run.py [--database-url URL] [--quick] [--only a,b,...] [--explain]

Sections (each in databases of its own, dropped afterwards):
  a  our daemon: N manual occurrences of one `allow` python no-op task queued first (bulk), then
     W `scheduler-daemon run` processes (W = 1, 3); jobs/s = N / (last job end - first job start)
     from the jobs' own records (bench/noop.py); transactions and round trips per occurrence
  b  PgQueuer, the same handler, 1 and 3 workers, batch size 10 (its default)
  c  pgbench running bench/job_life.sql (insert, claim with SKIP LOCKED, complete): the ceiling
  d  scheduled start lag, 3 daemons: one-shot tasks added at 50/s, each due 2 s later; then 500
     due within one second (p99); PgQueuer's equivalent with execute_after
  e  takeover after SIGKILL at default settings (p50, max); lease renewals per 1,000 running jobs
  g  idle loop iteration with 1,000,000 stored tasks, 100 due, against 10,000
  h  Client: bulk enqueue occurrences/s, single trigger / add_task latency on a reused connection
  i  a and b with the same cap on the jobs in flight per worker: our --concurrency 2 x batch, and
     PgQueuer's max_concurrent_tasks 2 x batch (the least it accepts: it refuses a cap below
     twice its batch, so b's PgQueuer, uncapped, has no equal at our --concurrency 10)
  j  a with the task in-process (`--in-process`: no worker process, the function called on a
     daemon thread), 1 and 3 daemons at --concurrency, beside b's PgQueuer (issue 33)
  k  awa (`awa-pg`), the same handler, 1 and 3 worker processes, its defaults (the `default`
     queue at 10 workers, 200 ms poll), N jobs queued first with its COPY bulk enqueue into its
     queue-storage engine; transactions per job (its round trips are not counted: Rust, not
     psycopg). Skipped, with the reason, when `awa` does not import
  (f, transactions and round trips per occurrence, is printed with a and b; with j, d also
  measures the start lag of in-process one-shot tasks)
"""

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/run.py`

from bench import counted
from bench.harness import PIN_ENV, compile_sources, median_run

SIZES = {
    # name: (full, quick)
    "jobs": (10_000, 1_000),
    "pgbench_seconds": (10, 3),
    "lag_seconds": (20.0, 4.0),
    "burst": (500, 200),
    "kills": (6, 2),
    "running": (1000, 100),
    "renew_window": (20.0, 11.0),
    "stored": (1_000_000, 50_000),
    "stored_small": (10_000, 1_000),
    "idle_window": (10.0, 5.0),
    "bulk": (100_000, 20_000),
    "calls": (500, 200),
}
ALL = "abcdeghijk"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url",
        default=os.environ.get(
            "SCHEDULER_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
        help="a server this may create and drop sd_bench_* databases on",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: a try in minutes")
    parser.add_argument("--only", default=ALL, help=f"sections to run, e.g. 'a,b' (all: {ALL})")
    parser.add_argument("--concurrency", type=int, default=10, help="daemon --concurrency in a")
    parser.add_argument("--batch", type=int, default=10, help="PgQueuer batch size in b")
    parser.add_argument("--explain", action="store_true", help="print the hot statements' plans")
    parser.add_argument("--json", dest="json_path", help="also write the figures to this file")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="a, b, i, j and k run this many times, alternating the systems; each figure is the "
        "median (the single runs are printed too)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="each daemon and each PgQueuer worker, with what it starts, on one core (taskset)",
    )
    args = parser.parse_args()
    if args.pin:
        os.environ[PIN_ENV] = "1"
    size = {k: v[1] if args.quick else v[0] for k, v in SIZES.items()}
    size["batch"] = args.batch
    only = set(args.only.replace(",", ""))
    compile_sources()
    counter = counted.install()  # the Client's round trips in h

    from scheduler_daemon.logconfig import configure

    configure("warning")
    server = args.database_url
    figures: dict[str, Any] = {"sizes": size, "quick": args.quick}

    def report(key: str, value: Any) -> None:
        figures[key] = value
        print(f"{key}: {_fmt(value)}", flush=True)

    started = time.time()
    run_sections(args, size, only, report, counter)
    print(f"\n(sections took {time.time() - started:.0f} s)")
    print(summary(figures, size))
    if args.explain:
        from bench.explain import explain

        print("\n# EXPLAIN of the hot statements\n")
        print(explain(server, int(size["stored"]), 100_000 if not args.quick else 20_000))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(figures, indent=2, default=str))


def run_sections(
    args: argparse.Namespace,
    size: dict[str, Any],
    only: set[str],
    report: Callable[[str, Any], None],
    counter: dict[str, int],
) -> None:
    from bench import sections

    server = args.database_url
    _throughput_sections(args, size, only, report)
    if "c" in only:
        for w in (1, 3):
            for script, key in (("job_life", "pgbench"), ("job_life_batch", "pgbench_batch")):
                rate = sections.pgbench_job_life(server, w, size["pgbench_seconds"], script)
                report(f"{key}_{w}", {"jobs_s": rate})
    if "d" in only:
        report("lag_ours", sections.ours_lag(server, 50, size["lag_seconds"], size["burst"]))
        if "j" in only:
            lag = sections.ours_lag(server, 50, size["lag_seconds"], size["burst"], True)
            report("lag_ours_inproc", lag)
        report("lag_pgqueuer", sections.pgq_lag(server, 50, size["lag_seconds"], size["burst"]))
    if "e" in only:
        report("takeover", sections.takeover(server, size["kills"], 1.7 if not args.quick else 1.0))
        report("renewals", sections.renewals(server, size["running"], size["renew_window"]))
    if "g" in only:
        port = 18_000 + os.getpid() % 1000
        for key in ("stored_small", "stored"):
            stats = sections.idle_loop(server, size[key], 100, size["idle_window"], port)
            report(f"idle_{size[key]}", stats)
    if "h" in only:
        report("client", sections.client_figures(server, size["bulk"], size["calls"], counter))


def _throughput_sections(
    args: argparse.Namespace,
    size: dict[str, Any],
    only: set[str],
    report: Callable[[str, Any], None],
) -> None:
    """a, b, i (both at the same cap on the jobs in flight per worker), j and k."""
    from bench import sections

    if "k" in only and (reason := awa_missing()):
        print(f"k skipped: {reason}", flush=True)
        only = only - {"k"}

    server, jobs, cap = args.database_url, size["jobs"], 2 * args.batch
    for w in (1, 3):
        plan: list[tuple[str, Callable[..., dict[str, float]], tuple[Any, ...]]] = []
        if "a" in only:
            plan.append((f"ours_{w}", sections.ours_throughput, (args.concurrency,)))
        if "j" in only:
            plan.append((f"ours_inproc_{w}", sections.ours_throughput, (args.concurrency, True)))
        if "b" in only:
            plan.append((f"pgqueuer_{w}", sections.pgq_throughput, (args.batch,)))
        if "i" in only:
            plan.append((f"ours_capped_{w}", sections.ours_throughput, (cap,)))
            plan.append((f"pgqueuer_capped_{w}", sections.pgq_throughput, (args.batch, cap)))
        if "k" in only:
            plan.append((f"awa_{w}", sections.awa_throughput, ()))
        runs: dict[str, list[dict[str, Any]]] = {key: [] for key, _, _ in plan}
        for _ in range(args.repeat):  # alternating, so a slow stretch of the host hits both
            for key, measure, extra in plan:
                runs[key].append(measure(server, jobs, w, *extra))
                if args.repeat > 1:
                    print(f"  {key} run {len(runs[key])}: {_fmt(runs[key][-1])}", flush=True)
        for key, results in runs.items():
            report(key, median_run(results))


def awa_missing() -> str | None:
    """Why section k cannot run here, or None."""
    try:
        import awa  # noqa: F401
    except ImportError as error:
        return f"awa-pg is not installed ({error}); pip install -e '.[bench]'"
    return None


def _fmt(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def summary(f: dict[str, Any], size: dict[str, Any]) -> str:
    def get(key: str, field: str) -> float | None:
        return f.get(key, {}).get(field)

    lines = ["", "| figure | ours | PgQueuer | pgbench | ours / PgQueuer | ours / pgbench |"]
    lines.append("|---|---|---|---|---|---|")
    lines += _throughput_rows(get, size)
    for w in (1, 3):
        for field, label in (("xacts_per_job", "transactions"), ("round_trips_per_job", "trips")):
            ours, pgq = get(f"ours_{w}", field), get(f"pgqueuer_{w}", field)
            if ours is not None or pgq is not None:
                lines.append(
                    f"| {label} per job, {w} worker(s) | {_n(ours, 2)} | {_n(pgq, 2)} | "
                    f"3 | {_ratio(ours, pgq)} | |"
                )
    lines += _awa_rows(get)
    for key, kind in (("lag_ours", ""), ("lag_ours_inproc", ", in-process")):
        for phase, label in (("steady", "50 firings/s"), ("burst", f"{size['burst']} due in 1 s")):
            ours = f.get(key, {}).get(phase, {})
            pgq = f.get("lag_pgqueuer", {}).get(phase, {})
            for p in ("p50", "p99", "max"):
                if ours.get(p) is not None:
                    lines.append(
                        f"| start lag {label}{kind} {p} (ms) | {_n(ours.get(p), 1)} | "
                        f"{_n(pgq.get(p), 1)} | | {_ratio(ours.get(p), pgq.get(p))} | |"
                    )
    if "takeover" in f:
        t = f["takeover"]
        lines.append(
            f"| takeover after SIGKILL, defaults, p50 / max (s), n={t['n']} | "
            f"{t['p50_s']:.1f} / {t['max_s']:.1f} (bound {t['bound_s']:.0f}) | | | | |"
        )
    if "renewals" in f:
        r = f["renewals"]
        lines.append(
            f"| lease rows renewed/s per 1,000 running jobs ({r['running']} ran) | "
            f"{r['renewed_rows_s_per_1000']:.0f} rows/s in "
            f"{r['renewal_statements_s']:.2f} statements/s (3 daemons) | | | | |"
        )
    small, big = f.get(f"idle_{size['stored_small']}"), f.get(f"idle_{size['stored']}")
    if small and big:
        lines.append(
            f"| idle loop iteration, 100 due, mean ms: {big['stored']:,} vs "
            f"{small['stored']:,} tasks | {big['mean_ms']:.2f} vs {small['mean_ms']:.2f} "
            f"({_ratio(big['mean_ms'], small['mean_ms'])}) | | | | |"
        )
    if "client" in f:
        c = f["client"]
        lines.append(
            f"| Client bulk trigger, occurrences/s | {c['bulk_occurrences_s']:,.0f} | | | | |"
        )
        lines.append(f"| Client add_tasks, tasks/s | {c['add_tasks_s']:,.0f} | | | | |")
        lines.append(
            f"| Client trigger p50 / p99 (ms), reused connection | {c['trigger_p50_ms']:.2f} / "
            f"{c['trigger_p99_ms']:.2f} ({c['trigger_round_trips']:.0f} round trips) | | | | |"
        )
        lines.append(
            f"| Client add_task p50 / p99 (ms) | {c['add_task_p50_ms']:.2f} / "
            f"{c['add_task_p99_ms']:.2f} ({c['add_task_round_trips']:.0f} round trips) | | | | |"
        )
    return "\n".join(lines)


def _throughput_rows(get: Callable[[str, str], float | None], size: dict[str, Any]) -> list[str]:
    lines = []
    for w in (1, 3):
        ours, pgq, pgb = (get(f"{k}_{w}", "jobs_s") for k in ("ours", "pgqueuer", "pgbench"))
        batch = get(f"pgbench_batch_{w}", "jobs_s")
        if ours is None and pgq is None and pgb is None:
            continue
        lines.append(
            f"| jobs/s, {w} worker(s) (pgbench: 1 job a life / 10 a batch) | {_n(ours)} | "
            f"{_n(pgq)} | {_n(pgb)} / {_n(batch)} | {_ratio(ours, pgq)} | "
            f"{_ratio(ours, pgb)} / {_ratio(ours, batch)} |"
        )
    for w in (1, 3):
        ours, pgq = get(f"ours_inproc_{w}", "jobs_s"), get(f"pgqueuer_{w}", "jobs_s")
        if ours is not None:
            lines.append(
                f"| jobs/s, {w} worker(s), our task in-process | {_n(ours)} | {_n(pgq)} | | "
                f"{_ratio(ours, pgq)} | |"
            )
    for w in (1, 3):
        ours, pgq = get(f"ours_capped_{w}", "jobs_s"), get(f"pgqueuer_capped_{w}", "jobs_s")
        if ours is not None or pgq is not None:
            lines.append(
                f"| jobs/s, {w} worker(s), both capped at {2 * size['batch']} in flight per worker "
                f"| {_n(ours)} | {_n(pgq)} | | {_ratio(ours, pgq)} | |"
            )
    return lines


def _awa_rows(get: Callable[[str, str], float | None]) -> list[str]:
    """k: awa in the PgQueuer column's place, ratios ours / awa."""
    lines = []
    for w in (1, 3):
        for field, label, digits in (
            ("jobs_s", "jobs/s", 0),
            ("xacts_per_job", "transactions per job", 2),
        ):
            ours, peer = get(f"ours_{w}", field), get(f"awa_{w}", field)
            if peer is not None:
                lines.append(
                    f"| {label}, {w} worker(s), awa (in the PgQueuer column; ours / awa) | "
                    f"{_n(ours, digits)} | {_n(peer, digits)} | | {_ratio(ours, peer)} | |"
                )
    return lines


def _n(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


if __name__ == "__main__":
    main()
