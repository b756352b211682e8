"""A schedule in words for people (the web console's task page), and the notes on DST changes
among a task's next firings in its zone."""

import itertools
from collections.abc import Sequence
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

_DAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")


def _every(n: str, unit: str) -> str | None:
    """`*/n` as "every n units" (`*` as "every unit"); None for anything else."""
    if n == "*":
        return f"every {unit}"
    if n.startswith("*/") and n[2:].isdigit():
        return f"every {int(n[2:])} {unit}s"
    return None


def cron_words(expression: str, zone: str) -> str:
    """The common shapes of a five-field cron expression in words ("every 5 minutes", "at 09:30
    every day", "at 02:00 on Monday"), else the fields named one by one; the zone is always said."""
    fields = expression.split()
    if len(fields) != 5:
        return f"cron {expression} ({zone})"
    minute, hour, dom, month, dow = fields
    words = _common(minute, hour, dow) if dom == "*" and month == "*" else None
    if words is not None:
        return f"{words} ({zone})"
    return (
        f"cron {expression}: minute {minute}, hour {hour}, day of month {dom}, month {month}, "
        f"day of week {dow} ({zone})"
    )


def _common(minute: str, hour: str, dow: str) -> str | None:
    """A daily or weekly shape in words, None for any other."""
    if dow == "*" and hour == "*":
        every = _every(minute, "minute")
        if every is None and minute.isdigit():
            every = f"at minute {int(minute)} of every hour"
        return every
    if not minute.isdigit():
        return None
    every_hour = _every(hour, "hour")
    if every_hour is not None and dow == "*":
        return f"at minute {int(minute)}, {every_hour}"
    if not hour.isdigit():
        return None
    at = f"at {int(hour):02d}:{int(minute):02d}"
    if dow == "*":
        return f"{at} every day"
    return f"{at} on {_DAYS[int(dow) % 7]}" if dow.isdigit() and int(dow) <= 7 else None


def dst_notes(instants: Sequence[datetime], zone: str) -> list[str]:
    """One line per change of the zone's UTC offset between consecutive `instants` (a DST
    change among the next firings), saying from which offset to which."""
    tz = ZoneInfo(zone)
    notes = []
    for before, after in itertools.pairwise(instants):
        was, now = before.astimezone(tz).utcoffset(), after.astimezone(tz).utcoffset()
        if was != now:
            notes.append(
                f"{zone} changes its UTC offset from {_offset(was)} to {_offset(now)} between "
                f"{before.astimezone(tz).isoformat()} and {after.astimezone(tz).isoformat()}"
            )
    return notes


def _offset(value: timedelta | None) -> str:
    minutes = int((value or timedelta(0)).total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
