"""History planted by bulk SQL for bench/history_scale.py (issue 47's figures at scale), and what
it makes of the plans and readings; pure: statements as text, no connection
(tests/unit/test_bench_history_plant.py).

The planted history is what a fleet of `tasks` every-minute tasks left behind: `rows` ended
firings (1 in 50 skipped for overlap, 1 in 20 failed, the rest succeeded), each ran one with its
run, spread evenly over `partitions` dated partitions of `interval` each, the newest ending at
`end` (the start of the current interval, so the daemon's own jobs end after them). The first
`long_tasks` tasks keep their history ten years (`history_retention`), and one more task
(`hist-stale`) has a single outcome, in the oldest partition: its newest, which a drop must keep.

On the partitioned model (ADR 0033, `occurrence` and `run` PARTITION BY RANGE (finished_at))
each dated partition is filled as a table of its own, then attached: its indexes are built from
its rows at the attach (a sort each) rather than entry by entry, which plants 10,000,000 rows in
minutes. On today's unpartitioned tables the same rows go into `occurrence` and `run` as they
are, for the before.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

STALE_TASK = "hist-stale"
TASK_PREFIX = "hist-"
LONG_RETENTION = "3650 days"
# A dated partition as the upkeep names it: the table, `_p`, its lower bound as YYYYMMDDHH24MI.
DATED = re.compile(r"\b((?:occurrence|run)_p\d{12})\b")


@dataclass(frozen=True)
class Plan:
    rows: int  # ended firings
    partitions: int
    tasks: int = 1000
    long_tasks: int = 10
    interval: timedelta = timedelta(days=1)


def pair(text: str) -> tuple[int, int]:
    """`ROWS,PARTITIONS` as typed on a command line (argparse `type`): two positive integers,
    at least as many rows as partitions."""
    parts = text.replace("_", "").split(",")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected ROWS,PARTITIONS (e.g. 10000,4), got {text!r}")
    rows, partitions = int(parts[0]), int(parts[1])
    if partitions < 1 or rows < partitions:
        raise argparse.ArgumentTypeError(f"need 1 <= PARTITIONS <= ROWS, got {text!r}")
    return rows, partitions


def interval_start(now: datetime, interval: timedelta) -> datetime:
    """The start of the interval `now` is in, intervals counted from the Unix epoch (whole days
    from midnight UTC)."""
    epoch = datetime(1970, 1, 1, tzinfo=now.tzinfo)
    return epoch + ((now - epoch) // interval) * interval


def bounds(end: datetime, count: int, interval: timedelta) -> list[tuple[datetime, datetime]]:
    """`count` consecutive ranges of `interval` ending at `end`, oldest first."""
    return [(end - (count - i) * interval, end - (count - i - 1) * interval) for i in range(count)]


def spread(rows: int, partitions: int) -> list[int]:
    """`rows` shared among `partitions` as evenly as whole rows go, the first ones taking one
    more."""
    share, extra = divmod(rows, partitions)
    return [share + (1 if i < extra else 0) for i in range(partitions)]


def partition_name(table: str, lower: datetime) -> str:
    return f"{table}_p{lower:%Y%m%d%H%M}"


def _ts(at: datetime) -> str:
    return f"'{at.isoformat()}'::timestamptz"


TASKS_SQL = """INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload,
    next_run_at, paused, history_retention)
SELECT '{prefix}' || lpad(g::text, 6, '0'), 'interval', interval '1 minute', now(), 'python',
    jsonb_build_object('target', 'bench.noop_job:noop'), now() + interval '3650 days', true,
    CASE WHEN g <= {long} THEN interval '{retention}' END
FROM generate_series(1, {tasks}) g"""

STALE_SQL = """INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload,
    next_run_at, paused)
VALUES ('{stale}', 'interval', interval '1 day', now(), 'python',
    jsonb_build_object('target', 'bench.noop_job:noop'), now() + interval '3650 days', true)"""

# The planted tasks by their place (0-based), the stale one last: a temporary table of the
# planting session.
TASK_MAP_SQL = """CREATE TEMPORARY TABLE hist_task AS
SELECT id, (row_number() OVER (ORDER BY name) - 1)::int AS n FROM task
WHERE name LIKE '{prefix}%'"""

# One range of firings g (each of task g mod tasks, its sequence g div tasks + 1, so newer
# firings have higher sequences) ending evenly over [lo, hi), and the run of each that ran;
# every task's 50th firings skipped and its 7th of every 20 failed (by its own sequence, so no
# task only skips or only fails).
ROWS_SQL = """WITH o AS (
    INSERT INTO {occurrence} (id, task_id, occurrence_seq, scheduled_for, firing_count,
        trigger, overlap, status, reason, attempts, interruptions, lease_token, not_before,
        created_at, updated_at, finished_at) OVERRIDING SYSTEM VALUE
    SELECT {id_base} + g, t.id, s.seq, f.at - interval '1 second', 1,
        'schedule', 'forbid', f.status, CASE WHEN f.status = 'skipped' THEN 'overlap' END,
        f.ran, 0, f.ran, f.at - interval '1 second', f.at - interval '1 second', f.at, f.at
    FROM generate_series({first}, {last}) g
    JOIN hist_task t ON t.n = (g - 1) % {tasks}
    CROSS JOIN LATERAL (SELECT (g - 1) / {tasks} + 1 AS seq) s
    CROSS JOIN LATERAL (
        SELECT {lo} + (g - {first}) * (({hi} - {lo}) / {count}) AS at,
            CASE WHEN s.seq % 50 = 0 THEN 'skipped' WHEN s.seq % 20 = 7 THEN 'failed'
                 ELSE 'success' END AS status,
            CASE WHEN s.seq % 50 = 0 THEN 0 ELSE 1 END AS ran
    ) f
    RETURNING id, status, finished_at
)
INSERT INTO {run} (id, occurrence_id, attempt, owner, lease_token, lease_expires_at,
    takeover_at, status, exit_code, finished_by, started_at, finished_at, build_revision)
    OVERRIDING SYSTEM VALUE
SELECT {run_base} + (o.id - {id_base}), o.id, 1, 'planted', 1,
    o.finished_at + interval '15 seconds', o.finished_at + interval '20 seconds', o.status,
    CASE WHEN o.status = 'success' THEN 0 ELSE 1 END, 'planted',
    o.finished_at - interval '1 second', o.finished_at, 'planted'
FROM o WHERE o.status <> 'skipped'"""

STALE_ROW_SQL = """INSERT INTO {occurrence} (id, task_id, occurrence_seq, scheduled_for,
    firing_count, trigger, overlap, status, attempts, interruptions, lease_token, not_before,
    created_at, updated_at, finished_at) OVERRIDING SYSTEM VALUE
SELECT {id_base}, id, 1, {at} - interval '1 second', 1, 'schedule', 'forbid', 'success', 1, 0,
    1, {at} - interval '1 second', {at} - interval '1 second', {at}, {at}
FROM task WHERE name = '{stale}'"""

AFTER_SQL = (
    "UPDATE task t SET occurrence_seq = s.seq FROM (SELECT task_id, max(occurrence_seq) AS seq "
    "FROM occurrence GROUP BY task_id) s WHERE s.task_id = t.id AND t.name LIKE '{prefix}%'",
    "SELECT setval(pg_get_serial_sequence('occurrence', 'id'), {id_end})",
    "SELECT setval(pg_get_serial_sequence('run', 'id'), {run_end})",
)


def plant_statements(
    plan: Plan,
    end: datetime,
    *,
    partitioned: bool,
    id_base: int,
    run_base: int,
    firing_key: bool = False,
) -> list[str]:
    """The statements that plant `plan` ending at `end`, each run on its own (autocommit; the
    last ones VACUUM), in one session (they share a temporary table). Ids start above
    `id_base` and `run_base` (the tables' highest), and the id sequences are moved past them.
    `firing_key`: the key table of guarantee 2 gets each scheduled firing's key."""
    ranges = bounds(end, plan.partitions, plan.interval)
    counts = spread(plan.rows, plan.partitions)
    out = [
        TASKS_SQL.format(
            prefix=TASK_PREFIX, long=plan.long_tasks, retention=LONG_RETENTION, tasks=plan.tasks
        ),
        STALE_SQL.format(stale=STALE_TASK),
        TASK_MAP_SQL.format(prefix=TASK_PREFIX),
    ]
    first = 1
    for (lo, hi), count in zip(ranges, counts, strict=True):
        occurrence, run = "occurrence", "run"
        if partitioned:
            occurrence, run = partition_name("occurrence", lo), partition_name("run", lo)
            out += [
                f"CREATE TABLE {occurrence} (LIKE occurrence INCLUDING DEFAULTS "
                "INCLUDING CONSTRAINTS)",
                f"CREATE TABLE {run} (LIKE run INCLUDING DEFAULTS INCLUDING CONSTRAINTS)",
            ]
        out.append(
            ROWS_SQL.format(
                occurrence=occurrence,
                run=run,
                id_base=id_base,
                run_base=run_base,
                tasks=plan.tasks,
                first=first,
                last=first + count - 1,
                count=count,
                lo=_ts(lo),
                hi=_ts(hi),
            )
        )
        if first == 1:  # the stale task's only outcome: the oldest range's middle
            out.append(
                STALE_ROW_SQL.format(
                    occurrence=occurrence,
                    id_base=id_base + plan.rows + 1,
                    at=_ts(lo + (hi - lo) / 2),
                    stale=STALE_TASK,
                )
            )
        if partitioned:
            out += [
                f"ALTER TABLE {table} ATTACH PARTITION {part} FOR VALUES FROM ({_ts(lo)}) "
                f"TO ({_ts(hi)})"
                for table, part in (("occurrence", occurrence), ("run", run))
            ]
        first += count
    if firing_key:
        out.append(
            "INSERT INTO firing_key (task_id, scheduled_for, trigger) SELECT o.task_id, "
            "o.scheduled_for, o.trigger FROM occurrence o JOIN hist_task t ON t.id = o.task_id "
            "WHERE o.trigger IN ('schedule', 'backfill') ORDER BY o.scheduled_for "
            "ON CONFLICT DO NOTHING"  # in time order, as dispatches write them
        )
    out += [
        s.format(prefix=TASK_PREFIX, id_end=id_base + plan.rows + 1, run_end=run_base + plan.rows)
        for s in AFTER_SQL
    ]
    out.append("VACUUM ANALYZE")
    return out


def dated(plan_lines: Iterable[str]) -> list[str]:
    """The dated partitions a plan's lines name (scanned, or probed by an index of theirs),
    sorted: on the partitioned model the hot path's plans must name none."""
    return sorted({m for line in plan_lines for m in DATED.findall(line)})


BUFFERS = re.compile(r"Buffers: shared((?: \w+=\d+)+)")


def statement_buffers(plan_text: str) -> int:
    """Shared buffers (hit + read) of one statement's text plan (auto_explain's, with
    log_buffers): its first `Buffers:` line, the top node's, which counts its children's; 0 for
    a plan without one (nothing read)."""
    m = BUFFERS.search(plan_text)
    if m is None:
        return 0
    counts = dict(part.split("=") for part in m.group(1).split())
    return int(counts.get("hit", 0)) + int(counts.get("read", 0))


def plan_buffers(plan: Mapping[str, Any]) -> int:
    """Shared buffers (hit + read) of one EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) entry: its
    top node's (which counts its children's) and its planning's."""
    top = plan["Plan"]
    planning = plan.get("Planning", {})
    return sum(
        int(part.get(key, 0))
        for part in (top, planning)
        for key in ("Shared Hit Blocks", "Shared Read Blocks")
    )


def retention_past(now: datetime, upper: datetime) -> timedelta:
    """The fleet retention (whole minutes) under which a partition ending at `upper` is past
    retention at `now` and the next one, starting there and at least a minute long, is not."""
    if now < upper:
        raise ValueError(f"{upper} is after {now}")
    return ((now - upper) // timedelta(minutes=1)) * timedelta(minutes=1)


def ratio(b: float, a: float) -> str:
    """B/A as printed beside a target, `-` when A is zero."""
    return f"{b / a:.3f}" if a else "-"


# One pg_waldump line: its total length, and its first block's relation (tablespace/db/filenode).
WAL_LINE = re.compile(r"len \(rec/tot\):\s*\d+/\s*(\d+).*?blkref #0: rel \d+/\d+/(\d+)")


def wal_by_relation(dump: str, names: Mapping[str, str]) -> list[tuple[str, int]]:
    """pg_waldump's records summed by the relation of their first block (`names`: filenode ->
    relation), most bytes first; a filenode not in `names` is `dropped <filenode>`, records
    without a block are `(no block)`."""
    totals: dict[str, int] = {}
    for line in dump.splitlines():
        if not line.startswith("rmgr:"):
            continue
        m = WAL_LINE.search(line)
        if m is None:
            size = re.search(r"len \(rec/tot\):\s*\d+/\s*(\d+)", line)
            key, nbytes = "(no block)", int(size.group(1)) if size else 0
        else:
            key, nbytes = names.get(m.group(2), f"dropped {m.group(2)}"), int(m.group(1))
        totals[key] = totals.get(key, 0) + nbytes
    return sorted(totals.items(), key=lambda kv: -kv[1])
