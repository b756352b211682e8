"""Retention by DROP against row-by-row DELETE, on a history partitioned by day (ADR 0033).

Plants --rows history rows (alternative B's occurrence_history, its six indexes) across --days
daily partitions with bulk SQL, on a private cluster of its own (as price.py's), then measures
on the oldest days, WAL from pg_stat_wal (full-page images apart) and wall time:

- DELETE of one day's rows (one statement, the lower bound of sql/retention.sql's batches),
  rolled back, then the DROP of that same day: in one transaction, the rows that must survive
  copied to occurrence_kept (a long-retention task's rows, and a task's rows from its shown newest
  outcome on when that is in that day: task_latest), the task_pruned marks raised from the day's
  scheduled rows (an index-only read of the day), and DROP TABLE of the partition;
- the VACUUM a committed DELETE of the next day owes afterwards;
- a task's newest outcome (ADR 0011) over every partition, and bounded to the newest ones.

    python3 bench/model/partitions.py --rows 10000000 --days 400     # ~15 min on 2 busy cores
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from price import HERE, TMP, Cluster, today_table, waldump

TASKS = 1000
LONG_RETENTION_TASKS = 10  # tasks 1..10 keep their history past the fleet's retention


def setup(cluster: Cluster, db: str, rows: int, days: int) -> None:
    cluster.psql("postgres", f"DROP DATABASE IF EXISTS {db}")
    cluster.psql("postgres", f"CREATE DATABASE {db}")
    ddl = (
        (HERE / "history.sql")
        .read_text()
        .replace("/*PARTITION*/", "PARTITION BY RANGE (finished_at)")
    )
    table, indexes = ddl.split("CREATE TABLE run_history")[0].split("CREATE INDEX", 1)
    table = today_table("task") + today_table("occurrence") + today_table("run") + table
    parts = "".join(
        f"CREATE TABLE occurrence_history_d{d} PARTITION OF occurrence_history FOR VALUES FROM "
        f"('2026-01-01'::timestamptz + {d} * interval '1 day') TO "
        f"('2026-01-01'::timestamptz + {d + 1} * interval '1 day');\n"
        for d in range(days)
    )
    per_day = rows // days
    step = int(days * 86400 * 1e6 / (per_day * days)) / 1e6  # seconds between rows, floored
    plant = f"""
SET maintenance_work_mem = '512MB';
SET max_parallel_maintenance_workers = 0;
INSERT INTO occurrence_history (id, task_id, occurrence_seq, scheduled_for, firing_count, trigger,
    overlap, status, attempts, interruptions, lease_token, not_before, created_at, updated_at,
    finished_at, idempotency_key)
SELECT g, g % {TASKS} + 1, g, f - interval '1 second', 1, 'schedule', 'forbid',
    CASE WHEN g % 20 = 0 THEN 'failed' ELSE 'success' END, 1, 0, 1, f - interval '1 second',
    f - interval '1 second', f, f,
    'scheduler-daemon:3f2504e0-4f89-11d3-9a0c-0305e82c3301:schedule:' || g
FROM generate_series(1, {per_day * days}) g,
     LATERAL (SELECT '2026-01-01'::timestamptz
                     + make_interval(secs => (g - 1) * {step:.6f}) AS f) t;
-- one task whose only (so newest) outcome is in the oldest day: the drop must keep it
INSERT INTO occurrence_history (id, task_id, occurrence_seq, scheduled_for, firing_count, trigger,
    overlap, status, attempts, interruptions, lease_token, not_before, created_at, updated_at,
    finished_at)
VALUES (0, {TASKS + 1}, 1, '2026-01-01 06:00', 1, 'schedule', 'forbid', 'success', 1, 0, 1,
    '2026-01-01 06:00', '2026-01-01 06:00', '2026-01-01 06:00:01', '2026-01-01 06:00:01');
CREATE INDEX {indexes}
CREATE TABLE occurrence_kept (LIKE occurrence_history);
CREATE INDEX occurrence_kept_task_seq_idx ON occurrence_kept (task_id, occurrence_seq);
CREATE TABLE task_pruned (task_id bigint PRIMARY KEY, pruned_through timestamptz NOT NULL,
    updated_at timestamptz NOT NULL);
CREATE TABLE task_retention (task_id bigint PRIMARY KEY, history_retention interval);
-- each task's shown newest outcome (ADR 0011's read, one probe whatever the partitions)
CREATE TABLE task_latest (task_id bigint PRIMARY KEY, occurrence_seq bigint NOT NULL,
    occurrence_id bigint NOT NULL, status text NOT NULL, finished_at timestamptz NOT NULL);
CREATE INDEX task_latest_finished_idx ON task_latest (finished_at);
INSERT INTO task_latest SELECT DISTINCT ON (task_id) task_id, occurrence_seq, id, status,
    finished_at FROM occurrence_history ORDER BY task_id, occurrence_seq DESC;
INSERT INTO task_retention SELECT g, CASE WHEN g <= {LONG_RETENTION_TASKS}
    THEN interval '3650 days' END FROM generate_series(1, {TASKS + 1}) g;
VACUUM ANALYZE;
"""  # noqa: S608 (SQL built from this file's constants)
    cluster.psql_file(db, table + ";\n" + parts + plant)


def measured(cluster: Cluster, db: str, sql: str) -> str:
    """Wall seconds of `sql` (one psql session) and its WAL, full-page images apart."""
    cluster.psql(db, "CHECKPOINT")
    lsn0 = cluster.psql(db, "SELECT pg_current_wal_insert_lsn()")
    start = time.monotonic()
    cluster.psql_file(db, sql)
    took = time.monotonic() - start
    lsn1 = cluster.psql(db, "SELECT pg_current_wal_insert_lsn()")
    kinds = waldump(cluster, lsn0, lsn1)
    fpi = sum(v[2] for v in kinds.values())
    return (
        f"{took:.3f} s, {sum(v[1] + v[2] for v in kinds.values())} B WAL of which "
        f"{fpi} B full-page images ({sum(v[1] for v in kinds.values())} B without)"
    )


def drop_sql(day: int) -> str:
    part = f"occurrence_history_d{day}"
    return f"""
BEGIN;
SET LOCAL lock_timeout = '1s';
-- the rows that outlive the partition: a longer retention's, and for a live task whose shown
-- newest outcome (task_latest) is in or before this day, its rows from that outcome on (the keep
-- rule); both driven from the few tasks concerned, each probing the partition's index
INSERT INTO occurrence_kept
SELECT h.* FROM task_retention t JOIN {part} h ON h.task_id = t.task_id
WHERE t.history_retention IS NOT NULL
UNION ALL
SELECT h.* FROM task_latest l JOIN {part} h
    ON h.task_id = l.task_id AND h.occurrence_seq >= l.occurrence_seq
WHERE l.finished_at < '2026-01-01'::timestamptz + {day + 1} * interval '1 day'
  AND l.task_id NOT IN (SELECT task_id FROM task_retention WHERE history_retention IS NOT NULL);
-- the audit's marks, from an index-only read of the day's scheduled rows
INSERT INTO task_pruned AS p (task_id, pruned_through, updated_at)
SELECT task_id, max(scheduled_for), now() FROM {part} WHERE trigger = 'schedule'
GROUP BY task_id ORDER BY task_id
ON CONFLICT (task_id) DO UPDATE
    SET pruned_through = greatest(p.pruned_through, excluded.pruned_through),
        updated_at = excluded.updated_at;
DROP TABLE {part};
COMMIT;
"""  # noqa: S608


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datadir", default=os.path.join(TMP, "sd_model_parts"))
    ap.add_argument("--port", type=int, default=5498)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--days", type=int, default=400)
    ap.add_argument("--reuse", action="store_true", help="the planted database as it is")
    args = ap.parse_args()
    cluster = Cluster(Path(args.datadir), args.port)
    cluster.start()
    db = "model_parts"
    print(f"load average at start: {os.getloadavg()}", flush=True)
    if not args.reuse:
        start = time.monotonic()
        setup(cluster, db, args.rows, args.days)
        print(
            f"planted {args.rows} rows in {args.days} partitions: {time.monotonic() - start:.0f} s"
        )
    day = int(
        cluster.psql(
            db,
            "SELECT min(substr(relname, 21)::int) FROM pg_stat_user_tables "
            "WHERE relname LIKE 'occurrence_history_d%'",
        )
    )
    rows_day = cluster.psql(db, f"SELECT count(*) FROM occurrence_history_d{day}")  # noqa: S608
    bound = f"'2026-01-01'::timestamptz + {day + 1} * interval '1 day'"
    delete = f"BEGIN;\nDELETE FROM occurrence_history WHERE finished_at < {bound};\nROLLBACK;\n"
    for name, sql in (("DELETE (rolled back)", delete), ("DROP with the kept copy", drop_sql(day))):
        print(f"day {day} ({rows_day} rows) {name}: {measured(cluster, db, sql)}", flush=True)
    kept = cluster.psql(db, "SELECT count(*) FROM occurrence_kept")
    print(f"kept rows: {kept}")
    nxt = day + 1
    bound = f"'2026-01-01'::timestamptz + {nxt + 1} * interval '1 day'"
    cluster.psql(db, f"DELETE FROM occurrence_history WHERE finished_at < {bound}")  # noqa: S608
    vacuum = measured(cluster, db, f"VACUUM occurrence_history_d{nxt};")
    print(f"VACUUM after a committed DELETE of day {nxt}: {vacuum}")
    for name, cond in (
        ("every partition", ""),
        (
            "the newest 2 days",
            f"AND finished_at >= '2026-01-01'::timestamptz + {args.days - 2} * interval '1 day' ",
        ),
    ):
        plan = cluster.psql(
            db,
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, SUMMARY ON) SELECT id, status FROM "  # noqa: S608
            f"occurrence_history WHERE task_id = 500 AND status <> 'skipped' {cond}"
            "ORDER BY occurrence_seq DESC LIMIT 1",
        )
        lines = plan.splitlines()
        buffers = next((ln.strip() for ln in lines if "Buffers" in ln), "")
        print(f"newest outcome over {name}: {buffers}; {lines[-1].strip()}")
    print(f"load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
