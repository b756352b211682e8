"""Prices the data-model alternatives of ADR 0033 (issue 47) on a PostgreSQL server of its own.

Each alternative's job life (insert a queued scheduled firing; claim it with SKIP LOCKED; complete
it fenced on its token) runs under pgbench, one client, in a scratch database of its own, on a
private cluster started here (initdb, autovacuum off, no checkpoint but ours), so the WAL counters
hold this benchmark's writes alone however loaded the machine is:

- WAL per job after a CHECKPOINT over --jobs jobs: bytes from pg_stat_wal, full-page images apart
  (wal_fpi, and their bytes from pg_waldump --stats), records by kind, index entries written
  (B-tree leaf inserts) per job; then the VACUUM of its tables afterwards, per job.
- Server CPU per job (every process of the private cluster, reaped backends included), as a
  ratio to A, alternatives interleaved round by round in one sitting.

    python3 bench/model/price.py --jobs 10000 --rounds 3 --cpu-jobs 3000
    python3 bench/model/price.py --only A,E --jobs 2000   # quick look

Stdlib only; needs the PostgreSQL 15 binaries (initdb, pg_ctl, pgbench, pg_waldump) on PATH or in
/usr/lib/postgresql/15/bin.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA = HERE.parent.parent / "sql" / "schema.sql"
BIN = Path("/usr/lib/postgresql/15/bin")
CLK = os.sysconf("SC_CLK_TCK")
TMP = tempfile.gettempdir()  # the private cluster's socket directory

HISTORY_COLUMNS = (
    "id, task_id, occurrence_seq, scheduled_for, last_scheduled_for, firing_count, trigger, "
    "overlap, concurrency_key, status, reason, requested_by, attempts, interruptions, "
    "lease_token, not_before, error, created_at, updated_at, finished_at, cancel_reason, "
    "created_xid, "
    "first_claim_snapshot, idempotency_key, retry_delay, spread_offset, args"
)
RUN_HISTORY_COLUMNS = (
    "id, occurrence_id, attempt, owner, lease_token, lease_expires_at, takeover_at, status, "
    "exit_code, http_status, output_tail, error, finished_by, started_at, finished_at, "
    "build_revision, uuid"
)
# A row ended in place keeps its own outcome; a row the completion moves ends a success now.
ENDED = {
    "status": "CASE WHEN {t}.finished_at IS NULL THEN 'success' ELSE {t}.status END",
    "finished_at": "coalesce({t}.finished_at, clock_timestamp())",
    "exit_code": "CASE WHEN {t}.finished_at IS NULL THEN 0 ELSE {t}.exit_code END",
    "finished_by": "coalesce({t}.finished_by, 'bench')",
}
HISTORY_VALUES = ", ".join(
    ENDED.get(c, "{t}." + c).format(t="o") for c in HISTORY_COLUMNS.split(", ")
)
RUN_HISTORY_VALUES = ", ".join(
    ENDED.get(c, "{t}." + c).format(t="e") for c in RUN_HISTORY_COLUMNS.split(", ")
)
INSERT_TODAY = (
    "\\set task random(1, 100)\n"
    "WITH k AS (SELECT :task::bigint AS task_id, clock_timestamp() AS scheduled_for)\n"
    "{insert}\nON CONFLICT (task_id, scheduled_for) WHERE trigger = 'schedule' DO NOTHING;\n"
)
INSERT_KEYED = (
    "\\set task random(1, 100)\n"
    "WITH k AS (INSERT INTO firing_key (task_id, scheduled_for, trigger)\n"
    "    VALUES (:task, clock_timestamp(), 'schedule') ON CONFLICT DO NOTHING\n"
    "    RETURNING task_id, scheduled_for)\n{insert};\n"
)
# name: (DDL files, partitioned history tables, insert, claim, completion, extra step)
ALTERNATIVES = {
    "A": ((), (), INSERT_TODAY, "claim.sql", "complete_update.sql", None),
    "B": (
        ("hot_tables.sql", "hot_run.sql", "history.sql"),
        ("occurrence_history", "run_history"),
        INSERT_KEYED,
        "claim.sql",
        "complete_move.sql",
        None,
    ),
    "C": (
        ("hot_tables.sql", "hot_run.sql", "history.sql", "c_patch.sql"),
        (),
        INSERT_KEYED,
        "claim.sql",
        "complete_update.sql",
        "c_move.sql",
    ),
    "D": (("d_patch.sql",), (), INSERT_TODAY, "claim.sql", "complete_update.sql", None),
    "E": (
        ("hot_tables.sql", "e_tables.sql", "history.sql", "e_history.sql"),
        ("firing_history", "attempt_history"),
        INSERT_KEYED,
        "e_claim.sql",
        "e_complete.sql",
        None,
    ),
    "F": (
        ("hot_tables.sql", "e_tables.sql", "history.sql", "e_history.sql", "f_latest.sql"),
        ("firing_history", "attempt_history"),
        INSERT_KEYED,
        "e_claim.sql",
        "e_complete.sql",
        None,
    ),
}


def tool(name: str) -> str:
    found = shutil.which(name)
    return found or str(BIN / name)


def owner(cmd: list[str]) -> list[str]:
    """The server's tools run as `postgres` when this runs as root (initdb refuses root)."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


# The model's server: no checkpoint but ours, no autovacuum, commits not waiting for the disk.
SETTINGS = (
    "-c shared_buffers=1GB -c max_wal_size=100GB -c min_wal_size=2GB "
    "-c checkpoint_timeout=1d -c autovacuum=off -c synchronous_commit=off "
    "-c max_locks_per_transaction=1024"
)


class Cluster:
    """A private PostgreSQL cluster: its data directory, port and processes."""

    def __init__(self, datadir: Path, port: int, settings: str = SETTINGS) -> None:
        self.datadir = datadir
        self.port = port
        self.settings = settings

    def start(self) -> None:
        if not (self.datadir / "PG_VERSION").exists():
            self.datadir.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                shutil.chown(self.datadir, "postgres", "postgres")
            run(owner([tool("initdb"), "-D", str(self.datadir), "-U", "postgres", "-A", "trust"]))
        opts = f"-p {self.port} -c listen_addresses='' -c unix_socket_directories={TMP} "
        opts += self.settings
        if not (self.datadir / "postmaster.pid").exists():
            log = str(self.datadir / "server.log")
            run(
                owner(
                    [tool("pg_ctl"), "-D", str(self.datadir), "-o", opts, "-l", log, "-w", "start"]
                )
            )

    def stop(self) -> None:
        run(owner([tool("pg_ctl"), "-D", str(self.datadir), "-m", "fast", "-w", "stop"]))

    def client(self, name: str, db: str) -> list[str]:
        return [name, "-h", TMP, "-p", str(self.port), "-U", "postgres", "-d", db]

    def psql(self, db: str, sql: str) -> str:
        out = subprocess.run(
            [*self.client("psql", db), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At", "-c", sql],
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout.strip()

    def psql_file(self, db: str, text: str) -> None:
        subprocess.run(
            [*self.client("psql", db), "-X", "-q", "-v", "ON_ERROR_STOP=1"],
            input=text,
            check=True,
            capture_output=True,
            text=True,
        )

    def cpu_seconds(self) -> float:
        """User + system CPU of every process of the cluster, the reaped backends' included."""
        pid = int((self.datadir / "postmaster.pid").read_text().split()[0])
        total = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(entry) == pid:
                total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
            elif int(fields[1]) == pid:
                total += int(fields[11]) + int(fields[12])
        return total / CLK

    def pgbench(self, db: str, script: Path, jobs: int) -> float:
        start = time.monotonic()
        run([*self.client("pgbench", db), "-n", "-c", "1", "-t", str(jobs), "-f", str(script)])
        return time.monotonic() - start


def run(cmd: list[str]) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def today_table(name: str) -> str:
    """The CREATE TABLE statement of `name` in sql/schema.sql (columns, CHECKs, keys, FKs)."""
    table = re.search(rf"^CREATE TABLE {name} \(.*?^\);$", SCHEMA.read_text(), re.S | re.M)
    assert table, name
    return table.group(0) + "\n"


def today_indexes(name: str) -> str:
    """The CREATE INDEX statements of `name` in sql/schema.sql."""
    pattern = rf"^CREATE (?:UNIQUE )?INDEX \S+ ON public\.{name} .*;$"
    return "\n".join(re.findall(pattern, SCHEMA.read_text(), re.M)) + "\n"


def partitions_sql(tables: tuple[str, ...], days_back: int, days_ahead: int) -> str:
    out = []
    for table in tables:
        for d in range(-days_back, days_ahead + 1):
            out.append(
                f"CREATE TABLE {table}_d{d + days_back} PARTITION OF {table} FOR VALUES FROM "
                f"(date_trunc('day', now()) + {d} * interval '1 day') TO "
                f"(date_trunc('day', now()) + {d + 1} * interval '1 day');"
            )
    return "\n".join(out) + "\n"


def plant_sql(table: str, rows: int, days: int) -> str:
    """`rows` ended firings (and their keys) of the 100 tasks over the `days` before today,
    below every id and sequence number the job life issues (negative)."""
    step = (days - 1) * 86400 / max(rows, 1)
    return (
        f"INSERT INTO {table} (id, task_id, occurrence_seq, scheduled_for, firing_count, "  # noqa: S608
        "trigger, overlap, status, attempts, interruptions, lease_token, not_before, "
        "created_at, updated_at, finished_at, idempotency_key) "
        "SELECT -g, g % 100 + 1, -g, f, 1, 'schedule', 'forbid', "
        "CASE WHEN g % 20 = 0 THEN 'failed' ELSE 'success' END, 1, 0, 1, f, f, f, f, "
        "'scheduler-daemon:planted:' || g "
        f"FROM generate_series(1, {rows}) g, LATERAL (SELECT date_trunc('day', now()) "
        f"- make_interval(secs => g * {step:.6f}) AS f) t;\n"
        "INSERT INTO firing_key (task_id, scheduled_for, trigger) "
        f"SELECT task_id, scheduled_for, 'schedule' FROM {table};\n"
        "VACUUM ANALYZE;\n"
    )


def build(cluster: Cluster, alt: str, workdir: Path, history: tuple[int, int]) -> Path:
    """Creates the alternative's scratch database and writes its pgbench script; returns it.
    `alt` ending in `+`: the same alternative with history (rows, days) planted first."""
    files, partitioned, insert, claim, complete, extra = ALTERNATIVES[alt.rstrip("+")]
    db = dbname(alt)
    cluster.psql("postgres", f"DROP DATABASE IF EXISTS {db}")
    cluster.psql("postgres", f"CREATE DATABASE {db}")
    ddl = today_table("task") + (
        "INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload) "
        "SELECT 'task-' || g, 'interval', interval '1 minute', now(), 'python', '{}' "
        "FROM generate_series(1, 100) g;\n"
    )
    ddl += today_table("occurrence") + today_table("run")
    if alt in ("A", "D"):
        ddl += today_indexes("occurrence") + today_indexes("run")
    for name in files:
        part = "PARTITION BY RANGE (finished_at)" if partitioned else ""
        ddl += (HERE / name).read_text().replace("/*PARTITION*/", part)
    planted = alt.endswith("+") and partitioned
    ddl += partitions_sql(partitioned, history[1] if planted else 2, 3)
    ddl += "CREATE SEQUENCE bench_seq;\n"
    if planted:
        ddl += plant_sql(partitioned[0], *history)
    cluster.psql_file(db, ddl)
    body = (HERE / "insert_one.sql").read_text().split("\n", 3)[3]
    parts = [insert.format(insert=body.strip()), (HERE / claim).read_text()]
    parts.append((HERE / complete).read_text())
    if extra:
        parts.append((HERE / extra).read_text())
    write = (HERE / "write_history.sql").read_text().split("\n", 2)[2].rstrip()
    script = "\n".join(parts).replace("{{write_history}}", write)
    script = script.replace("{{history_columns}}", HISTORY_COLUMNS)
    script = script.replace("{{history_values}}", HISTORY_VALUES)
    script = script.replace("{{run_history_columns}}", RUN_HISTORY_COLUMNS)
    script = script.replace("{{run_history_values}}", RUN_HISTORY_VALUES)
    pick = (HERE / "pick.sql").read_text().split("\n", 2)[2]
    script = script.replace("{{picked}}", pick)
    latest = (HERE / "f_latest_cte.sql").read_text().rstrip() if alt.rstrip("+") == "F" else ""
    script = script.replace("{{latest}}", latest)
    path = workdir / f"life_{db}.sql"
    path.write_text(script)
    return path


def dbname(alt: str) -> str:
    return "model_" + alt.lower().replace("+", "_planted")


def wal_now(cluster: Cluster) -> tuple[str, int, int, int]:
    row = cluster.psql(
        "postgres",
        "SELECT pg_current_wal_insert_lsn(), wal_records, wal_fpi, wal_bytes FROM pg_stat_wal",
    )
    lsn, records, fpi, nbytes = row.split("|")
    return lsn, int(records), int(fpi), int(nbytes)


def waldump(cluster: Cluster, start: str, end: str) -> dict[str, tuple[int, int, int]]:
    """Record kind -> (count, record bytes, FPI bytes) between two LSNs."""
    for _ in range(50):  # synchronous_commit is off: wait for the WAL writer
        if cluster.psql("postgres", f"SELECT pg_current_wal_flush_lsn() >= '{end}'") == "t":
            break
        time.sleep(0.1)
    dump = [tool("pg_waldump"), "-p", str(cluster.datadir / "pg_wal"), "-s", start, "-e", end]
    out = subprocess.run(
        [*owner(dump), "--stats=record"], capture_output=True, text=True, check=False
    ).stdout
    kinds = {}
    for line in out.splitlines():
        m = re.match(r"^(\S+/\S+)\s+(\d+)\s+\([^)]*\)\s+(\d+)\s+\([^)]*\)\s+(\d+)", line)
        if m:
            kinds[m.group(1)] = (int(m.group(2)), int(m.group(3)), int(m.group(4)))
    return kinds


def wal_since(cluster: Cluster, lsn: str) -> tuple[int, int]:
    """WAL bytes since `lsn` (exact, from the LSNs) and full-page images (pg_stat_wal, read after
    the backends' statistics are flushed: at exit, or within a second of going idle)."""
    time.sleep(1.5)
    row = cluster.psql(
        "postgres",
        f"SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '{lsn}'), wal_fpi FROM pg_stat_wal",  # noqa: S608
    )
    nbytes, fpi = row.split("|")
    return int(float(nbytes)), int(fpi)


def price_wal(cluster: Cluster, alt: str, script: Path, jobs: int) -> dict[str, float]:
    db = dbname(alt)
    cluster.pgbench(db, script, 500)  # warm: the tables' first pages exist
    cluster.psql(db, "CHECKPOINT")
    lsn0, _, _, _ = wal_now(cluster)
    _, fpi0 = wal_since(cluster, lsn0)
    cluster.pgbench(db, script, jobs)
    lsn1, _, _, _ = wal_now(cluster)
    nbytes, fpi1 = wal_since(cluster, lsn0)
    kinds = waldump(cluster, lsn0, lsn1)
    fpi_bytes = sum(v[2] for v in kinds.values())
    entries = sum(
        v[0]
        for k, v in kinds.items()
        if k in ("Btree/INSERT_LEAF", "Btree/INSERT_POST", "Btree/SPLIT_L", "Btree/SPLIT_R")
    )
    heap = {k: v[0] / jobs for k, v in kinds.items() if k.startswith(("Heap/", "Heap2/"))}
    cluster.psql(db, "VACUUM")
    vacuum, fpi2 = wal_since(cluster, lsn1)
    return {
        "wal_B": nbytes / jobs,
        "wal_noFPI_B": (nbytes - fpi_bytes) / jobs,
        "fpi": (fpi1 - fpi0) / jobs,
        "records": sum(v[0] for v in kinds.values()) / jobs,
        "index_entries": entries / jobs,
        "vacuum_B": vacuum / jobs,
        "vacuum_fpi": (fpi2 - fpi1) / jobs,
        **{"heap:" + k: round(v, 2) for k, v in sorted(heap.items())},
    }


def price_cpu(
    cluster: Cluster, scripts: dict[str, Path], rounds: int, jobs: int
) -> dict[str, list[float]]:
    """CPU ms per job of the server, each alternative once a round, in a rotating order."""
    names = list(scripts)
    per: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for alt in order:
            cpu0 = cluster.cpu_seconds()
            wall = cluster.pgbench(dbname(alt), scripts[alt], jobs)
            time.sleep(0.3)  # the backend reaped into the postmaster's cutime
            ms = (cluster.cpu_seconds() - cpu0) * 1000 / jobs
            per[alt].append(ms)
            print(
                f"  round {r + 1} {alt}: {ms:.3f} ms CPU/job, {jobs / wall:.0f} jobs/s", flush=True
            )
    return per


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datadir", default=os.path.join(TMP, "sd_model_pg"))
    ap.add_argument("--port", type=int, default=5499)
    ap.add_argument("--only", default="A,B,C,D,E,F")
    ap.add_argument("--jobs", type=int, default=10000, help="jobs measured for WAL")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved CPU rounds")
    ap.add_argument("--cpu-jobs", type=int, default=3000, help="jobs per alternative per round")
    ap.add_argument("--stop", action="store_true", help="stop the private cluster at the end")
    ap.add_argument(
        "--history-rows",
        type=int,
        default=10_000_000,
        help="planted in the history of an alternative named with a `+` (e.g. --only F,F+)",
    )
    ap.add_argument("--history-days", type=int, default=400, help="daily partitions planted")
    args = ap.parse_args()
    cluster = Cluster(Path(args.datadir), args.port)
    cluster.start()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    workdir = Path(args.datadir + "_scripts")
    workdir.mkdir(exist_ok=True)
    alts = args.only.split(",")
    history = (args.history_rows, args.history_days)
    scripts = {alt: build(cluster, alt, workdir, history) for alt in alts}
    wal = {}
    for alt in alts:
        wal[alt] = price_wal(cluster, alt, scripts[alt], args.jobs)
        print(alt, {k: round(v, 2) for k, v in wal[alt].items()}, flush=True)
    cpu = price_cpu(cluster, scripts, args.rounds, args.cpu_jobs) if args.rounds else {}
    base = alts[0]
    print(f"\nload average at end: {os.getloadavg()}")
    print(
        "alt  WAL B/job  no-FPI B/job  FPI/job  records/job  index entries/job  vacuum B/job"
        "  CPU ms/job (median)  CPU / " + base + " (per round)"
    )
    for alt in alts:
        w = wal[alt]
        ratios = ""
        if cpu:
            ratios = " ".join(f"{a / b:.2f}" for a, b in zip(cpu[alt], cpu[base], strict=True))
            med = sorted(cpu[alt])[len(cpu[alt]) // 2]
        print(
            f"{alt}    {w['wal_B']:9.0f}  {w['wal_noFPI_B']:12.0f}  {w['fpi']:7.3f}  "
            f"{w['records']:11.1f}  {w['index_entries']:17.1f}  {w['vacuum_B']:12.0f}  "
            + (f"{med:19.3f}  {ratios}" if cpu else "")
        )
    if args.stop:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
