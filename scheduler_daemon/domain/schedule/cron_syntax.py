"""Cron syntax: which expressions are accepted (5 fields, or 6 with seconds last, or an alias),
the one-line reason a refused one gets, the parsed croniter each accepted one is read from, and
which days it names when both day fields are restricted (`day_parts`: either field matches)."""

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
_DAY_OF_MONTH, _DAY_OF_WEEK = 2, 4
_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_CRON_FIELD = re.compile(r"\S+", re.ASCII)
_HASHED = re.compile(r"[hr](\(\d+-\d+\))?(/\d+)?", re.IGNORECASE)
_EPOCH = datetime(2000, 1, 1)


def validate_cron(expr: str) -> None:
    """Raise ScheduleError unless `expr` is a 5-field cron (or 6 with seconds last) or an alias."""
    prototype(expr)


@functools.lru_cache(maxsize=1024)
def prototype(expr: str) -> croniter:
    """The croniter `expr` parses to (copy it before stepping); ScheduleError if refused: not
    cron syntax, or no day it names ever comes (`day_parts`: either day field matching)."""
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
        proto = parsed(text)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise _cron_error(expr, _cron_reason(fields, exc)) from None
    if not day_parts(text):
        raise _cron_error(expr, "it never fires")
    return proto


@functools.lru_cache(maxsize=2048)
def parsed(text: str) -> croniter:
    """croniter's parse of `text`, unchecked (it may never fire); copy it before stepping."""
    return croniter(text, _EPOCH)


def splits_day_fields(expr: str) -> bool:
    """Whether `expr` restricts both day fields and one of them holds `#`, a weekday's
    `L` (`L5`, the last Friday) or `W`. croniter reads such an expression as "both fields match"
    (a subset of its days, or none); classic cron, the docs, and this scheduler from revision
    0026 on fire on a day that matches either (`day_parts`)."""
    text = expr.strip()
    if text.startswith("@"):
        return False
    try:
        proto = parsed(text)
    except (ValueError, TypeError, KeyError, IndexError):
        return False  # refused with its reason by `prototype`
    restricted = proto.expanded[_DAY_OF_MONTH][0] != "*" and proto.expanded[_DAY_OF_WEEK][0] != "*"
    return restricted and bool(proto.nth_weekday_of_month or proto.nearest_weekday)


@functools.lru_cache(maxsize=1024)
def day_parts(text: str, *, either: bool = True) -> tuple[str, ...]:
    """Expressions whose matching days, put together, are the days `text` names, each of them
    one that fires at all (none: `text` never fires). Usually `text` alone: croniter already
    reads plain day fields, lists, ranges, steps and a month's `L` as "either matches". When
    `splits_day_fields`, the two single-field expressions: `text` with its day-of-week `*`, and
    `text` with its day-of-month `*`. `either` False: croniter's own reading of `text`, as builds
    before revision 0026 fired it (audit of the history they wrote)."""
    parts = [text]
    if either and splits_day_fields(text):
        fields = _CRON_FIELD.findall(text)
        parts = [
            " ".join("*" if i == blank else f for i, f in enumerate(fields))
            for blank in (_DAY_OF_WEEK, _DAY_OF_MONTH)
        ]
    return tuple(p for p in parts if _fires(p))


def _fires(text: str) -> bool:
    try:
        copy.copy(parsed(text)).get_next(datetime)
    except CroniterBadDateError:
        return False
    return True


def _cron_error(expr: str, reason: str) -> ScheduleError:
    return ScheduleError(f"invalid cron expression {expr!r}: {reason}")


def _cron_reason(fields: list[str], exc: Exception) -> str:
    for index, value in enumerate(fields):
        probe = ["*"] * len(fields)
        probe[index] = value
        try:
            croniter(" ".join(probe), _EPOCH)
        except (ValueError, TypeError, KeyError, IndexError):
            name, allowed = _FIELDS[index]
            return f"{name} {value!r} is not valid (allowed: {allowed})"
    message = re.sub(r"\[.*?\]\s*", "", str(exc)).strip()
    return message.splitlines()[0] if message else "not a cron expression"
