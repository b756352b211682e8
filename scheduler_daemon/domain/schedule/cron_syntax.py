"""Cron syntax: which expressions are accepted (5 fields, or 6 with seconds last, or an alias),
the one-line reason a refused one gets, and the parsed croniter each accepted one is read from."""

import copy
import functools
import re
from datetime import datetime

from croniter import CroniterBadDateError, croniter

from scheduler_daemon.domain.schedule.base import ScheduleError

_FIELDS = (
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31, L"),
    ("month", "1-12, JAN-DEC"),
    ("day-of-week", "0-7, SUN-SAT"),
    ("second", "0-59"),
)
_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_CRON_FIELD = re.compile(r"\S+", re.ASCII)
_HASHED = re.compile(r"[hr](\(\d+-\d+\))?(/\d+)?", re.IGNORECASE)


def validate_cron(expr: str) -> None:
    """Raise ScheduleError unless `expr` is a 5-field cron (or 6 with seconds last) or an alias."""
    prototype(expr)


@functools.lru_cache(maxsize=1024)
def prototype(expr: str) -> croniter:
    """The croniter `expr` parses to (copy it before stepping); ScheduleError if refused."""
    text = expr.strip()
    fields = _CRON_FIELD.findall(text)
    if text.lower() == "@reboot":
        raise _cron_error(expr, "@reboot has no fire times; use a one-shot schedule")
    if text.startswith("@") and text.lower() not in _ALIASES:
        raise _cron_error(expr, f"unknown alias; use one of {', '.join(_ALIASES)}")
    if not text.startswith("@"):
        if len(fields) not in (5, 6):
            raise _cron_error(
                expr, f"expected 5 fields (minute hour day month weekday) or 6, got {len(fields)}"
            )
        for (name, _), value in zip(_FIELDS, fields, strict=False):
            if _HASHED.fullmatch(value):
                raise _cron_error(expr, f"{name} {value!r}: H and R are not supported")
    try:
        proto = croniter(text, datetime(2000, 1, 1))
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise _cron_error(expr, _cron_reason(fields, exc)) from None
    try:
        copy.copy(proto).get_next(datetime)
    except CroniterBadDateError:
        raise _cron_error(expr, "it never fires") from None
    return proto


def _cron_error(expr: str, reason: str) -> ScheduleError:
    return ScheduleError(f"invalid cron expression {expr!r}: {reason}")


def _cron_reason(fields: list[str], exc: Exception) -> str:
    for index, value in enumerate(fields):
        probe = ["*"] * len(fields)
        probe[index] = value
        try:
            croniter(" ".join(probe), datetime(2000, 1, 1))
        except (ValueError, TypeError, KeyError, IndexError):
            name, allowed = _FIELDS[index]
            return f"{name} {value!r} is not valid (allowed: {allowed})"
    message = re.sub(r"\[.*?\]\s*", "", str(exc)).strip()
    return message.splitlines()[0] if message else "not a cron expression"
