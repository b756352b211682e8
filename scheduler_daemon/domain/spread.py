"""Deterministic spread (pure, issue 37 item 1): a firing's start offset within `--spread`, the
same on every replica and after every restart, and the bound that keeps a spread task from
overlapping itself."""

import hashlib
from datetime import UTC, datetime, timedelta

from scheduler_daemon.domain.duration import format_duration
from scheduler_daemon.domain.schedule.base import Schedule

MICROSECOND = timedelta(microseconds=1)
GAP_SAMPLE = 1000
"""`--spread` is held to half the shortest gap between consecutive firings among this many."""


def spread_key(task_id: int, nominal: datetime) -> bytes:
    """What the offset hashes: the task's id and the firing's nominal instant in UTC, ISO 8601
    to the microsecond (`42|2026-12-07T10:00:00.000000+00:00`). The id never changes for a task
    and is the same on every replica; the nominal instant is the firing's identity."""
    instant = nominal.astimezone(UTC).isoformat(timespec="microseconds")
    return f"{task_id}|{instant}".encode()


def spread_offset(task_id: int, nominal: datetime, spread: timedelta) -> timedelta:
    """The firing's start offset: the first 8 bytes of SHA-256 of `spread_key`, big-endian,
    modulo the spread in microseconds. In [0, spread): never negative, never past the window,
    and independent of the process (no `hash()`, whose seed differs per process)."""
    window = spread // MICROSECOND
    if window <= 0:
        return timedelta(0)
    digest = hashlib.sha256(spread_key(task_id, nominal)).digest()
    return int.from_bytes(digest[:8], "big") % window * MICROSECOND


def spread_start(task_id: int, nominal: datetime, spread: timedelta | None) -> datetime | None:
    """When a firing at `nominal` starts under `spread` (`tasks next`, the console's task page);
    None without a spread."""
    return None if spread is None else nominal + spread_offset(task_id, nominal, spread)


def shortest_gap(schedule: Schedule, after: datetime) -> timedelta | None:
    """The shortest gap between consecutive firings among the next GAP_SAMPLE after `after`
    (None: fewer than two firings, a one-shot)."""
    previous, gap = None, None
    for instant in schedule.fire_times(after, limit=GAP_SAMPLE):
        if previous is not None:
            step = instant - previous
            gap = step if gap is None else min(gap, step)
        previous = instant
    return gap


def spread_refusal(schedule: Schedule, spread: timedelta, after: datetime) -> str | None:
    """Why `spread` cannot be used with `schedule` (None: it can): at most half the shortest gap,
    so a firing starts before the next one is due and a `forbid` task is never skipped for
    overlap by its own spread."""
    gap = shortest_gap(schedule, after)
    if gap is None or spread * 2 <= gap:
        return None
    return (
        f"--spread {format_duration(spread)} is more than half the shortest gap between firings "
        f"({format_duration(gap)} among the next {GAP_SAMPLE}); at most {format_duration(gap / 2)}"
    )
