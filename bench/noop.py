"""The no-op job every system in bench/run.py runs: it records its own start and end wall time.

One line per job, appended to the file named by BENCH_RECORD: `ident due start end` (seconds since
the epoch; `due` is `-` when the job had no due time). Appends of one short line with O_APPEND are
atomic, so daemons, workers and their processes can share one file.
"""

import os
import time
from datetime import datetime
from typing import Any

RECORD_ENV = "BENCH_RECORD"


def _append(ident: object, due: float | None, start: float) -> None:
    line = f"{ident} {'-' if due is None else f'{due:.6f}'} {start:.6f} {time.time():.6f}\n"
    fd = os.open(os.environ[RECORD_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def record(ctx: Any) -> None:
    """scheduler-daemon's python executor target (`bench.noop:record`); due = scheduled_for."""
    start = time.time()
    scheduled: datetime = ctx.scheduled_for
    _append(ctx.occurrence_id, scheduled.timestamp(), start)


async def record_pgqueuer(job: Any) -> None:
    """PgQueuer's entrypoint; due = the job's execute_after (its database-clock due time)."""
    start = time.time()
    _append(job.id, job.execute_after.timestamp(), start)


async def record_awa(job: Any) -> None:
    """awa's handler (bench/awa_worker.py); due = the job's run_at (ISO 8601 text)."""
    start = time.time()
    _append(job.id, datetime.fromisoformat(job.run_at).timestamp(), start)


def read(path: str) -> list[tuple[str, float | None, float, float]]:
    """The records in `path`: (ident, due, start, end)."""
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path, encoding="ascii") as f:
        for line in f:
            ident, due, start, end = line.split()
            rows.append((ident, None if due == "-" else float(due), float(start), float(end)))
    return rows


def count(path: str) -> int:
    """How many jobs recorded so far (cheap: counts newlines)."""
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        return f.read().count(b"\n")
