"""Exclusion calendars (pure, ADR 0025): the local dates a calendar holds, read from `--date`,
`--range` or an iCalendar file, and which firings of a task they exclude.

A calendar is a set of dates, not instants: a date excludes every firing whose nominal time
(before any `--spread`) falls on it in the task's own time zone, so one calendar serves tasks in
any zone. An iCalendar file's events, recurring ones expanded (RRULE, RDATE, EXDATE) by
`recurring-ical-events`, are read over a bounded horizon (`ics_horizon`): an all-day event
excludes its dates (DTEND exclusive), a timed event the dates it touches in its own time (a
floating time as written).
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from scheduler_daemon.domain import limit
from scheduler_daemon.domain.row import FromRow
from scheduler_daemon.domain.schedule.base import Schedule
from scheduler_daemon.domain.status import CalendarSource
from scheduler_daemon.domain.task import InvalidTask

DAY = timedelta(days=1)
_MICROSECOND = timedelta(microseconds=1)
# An iCalendar file is expanded from a year before the database's today (a catch-up after an
# outage still finds its dates) to ICS_YEARS after it.
ICS_PAST = timedelta(days=366)
ICS_YEARS = 5
# `tasks next` looks this far past now for the end of a run of excluded firings it passes over;
# past it, it shows the schedule's own times.
RUN_HORIZON = timedelta(days=400)
# A run's summary row counts its firings one by one up to this many (as domain/misfire.py).
COUNT_CAP = 100_000
_T = TypeVar("_T")


class InvalidCalendar(InvalidTask):
    """A calendar's name, dates or file break a rule; the message is one line, fit for the CLI."""


@dataclass(frozen=True)
class CalendarDates:
    """What a calendar holds: its sorted, distinct dates, how they were given ('dates' or
    'ics'), and the span they cover (an iCalendar file: the horizon it was expanded over)."""

    days: tuple[date, ...]
    source_kind: str
    first_day: date | None
    last_day: date | None


def check_name(name: str) -> str:
    """A calendar's name: the bounds of a task's name (domain/limit.py), not all digits."""
    try:
        limit.name("calendar name", name)
    except limit.OutOfBounds as exc:
        raise InvalidCalendar(str(exc)) from None
    if name.strip() != name or name.isdigit() or not name:
        raise InvalidCalendar(
            f"calendar name must be 1 to {limit.MAX_NAME_LENGTH} characters without "
            "surrounding spaces, not all digits"
        )
    return name


def parse_day(text: str, label: str = "--date") -> date:
    """`YYYY-MM-DD` as a date; InvalidCalendar naming `label` otherwise."""
    found = None
    if len(text) == 10:
        try:
            found = date.fromisoformat(text)
        except ValueError:
            found = None
    if found is None:
        raise InvalidCalendar(f"{label} '{text[:40]}' is not a date such as 2030-12-25")
    return found


def parse_range(text: str) -> tuple[date, date]:
    """`A..B` (both dates included, A not after B)."""
    low, sep, high = text.partition("..")
    if not sep:
        raise InvalidCalendar(
            f"--range '{text[:40]}' is not a range such as 2030-12-24..2030-12-26"
        )
    first, last = parse_day(low, "--range"), parse_day(high, "--range")
    if last < first:
        raise InvalidCalendar(f"--range '{text[:40]}' ends before it starts")
    if (last - first).days >= limit.MAX_CALENDAR_DATES:
        raise InvalidCalendar(_too_many((last - first).days + 1))
    return first, last


def from_dates(days: Iterable[str], ranges: Iterable[str]) -> CalendarDates:
    """The calendar `--date` and `--range` options give: at least one date, at most
    MAX_CALENDAR_DATES distinct ones."""
    found = {parse_day(text) for text in days}
    for text in ranges:
        first, last = parse_range(text)
        found.update(first + DAY * i for i in range((last - first).days + 1))
        if len(found) > limit.MAX_CALENDAR_DATES:
            raise InvalidCalendar(_too_many(len(found)))
    if not found:
        raise InvalidCalendar("give the calendar's dates: --date, --range or --ics")
    return _bounded(sorted(found), CalendarSource.DATES, None)


def ics_horizon(today: date) -> tuple[date, date]:
    """The dates an iCalendar file is expanded over: [first, last], from a year before `today`
    (the database's) to ICS_YEARS after it."""
    first = today - ICS_PAST
    try:
        last = today.replace(year=today.year + ICS_YEARS) - DAY
    except ValueError:  # 29 February
        last = today.replace(year=today.year + ICS_YEARS, day=28)
    return first, last


def from_ics(data: bytes, today: date) -> CalendarDates:
    """The dates an iCalendar file's events cover within `ics_horizon(today)`. InvalidCalendar
    (one line) for a file that is too big, not iCalendar, holds no event, has a rule whose
    expansion is unbounded work (`_refuse_unbounded`), or yields no date in the horizon.

    Each event (its UID's components) is expanded on its own over the horizon at once, and the
    occurrences are counted as they come: `after()` walked the horizon in windows of 15 minutes
    that each iterated the rule from its DTSTART again (a daily rule took minutes, a secondly one
    from 1900 gigabytes). A pathological rule that still passes the checks (dateutil stepping a
    rule that never matches to the year 9999) is bounded by running this in a child process
    (scheduler_daemon.ics_reader)."""
    import icalendar

    if len(data) > limit.MAX_ICS_BYTES:
        raise InvalidCalendar(
            f"the iCalendar file is larger than {limit.MAX_ICS_BYTES // 1024} KiB"
        )
    first, last = ics_horizon(today)
    parsed = _read(lambda: icalendar.Calendar.from_ical(data))
    events = parsed.walk("VEVENT")
    if not events:
        raise InvalidCalendar("the iCalendar file holds no event (VEVENT)")
    _read(lambda: _refuse_unbounded(events, last))
    found = _read(lambda: _expand(parsed, events, first, last))
    if not found:
        raise InvalidCalendar(
            f"the iCalendar file's events fall on no date from {first} to {last}, the dates "
            "it is read over: a calendar needs at least one"
        )
    return _bounded(sorted(found), CalendarSource.ICS, (first, last))


def _read(step: Callable[[], _T]) -> _T:
    """`step()`, with whatever the parsers raise as one line (InvalidCalendar), but for our own
    refusals and MemoryError (the child process's memory limit, ics_reader)."""
    try:
        return step()
    except (InvalidCalendar, MemoryError):
        raise
    except Exception as exc:  # the parsers raise many kinds; any is a file we cannot read
        line = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise InvalidCalendar(f"not a valid iCalendar file: {line}") from None


def _expand(parsed: Any, events: list[Any], first: date, last: date) -> set[date]:
    """The dates from `first` to `last` the events cover, one event at a time, refused once
    they occur more than MAX_ICS_OCCURRENCES times or cover more than MAX_CALENDAR_DATES."""
    found: set[date] = set()
    examined = 0
    for one in _by_uid(parsed, events):
        for event in one.between(first, last + DAY):
            examined += 1
            if examined > limit.MAX_ICS_OCCURRENCES:
                raise InvalidCalendar(_too_often())
            found.update(_event_days(event, first, last))
        if len(found) > limit.MAX_CALENDAR_DATES:
            raise InvalidCalendar(_too_many(len(found)))
    return found


# The length of one step of each RRULE frequency a calendar may use: a rule may take at most
# limit.MAX_ICS_RULE_STEPS from its DTSTART to the horizon's end (dateutil walks every one,
# about 5 us each).
_STEP = {"DAILY": DAY, "WEEKLY": 7 * DAY, "MONTHLY": 28 * DAY, "YEARLY": 365 * DAY}


def _refuse_unbounded(events: list[Any], last: date) -> None:
    """Refuses, before any expansion, a rule whose work is not bounded by the horizon: one that
    repeats within a day (FREQ=SECONDLY, MINUTELY, HOURLY, or BYHOUR, BYMINUTE, BYSECOND listing
    more than one value: a calendar holds dates), or one whose DTSTART lies so far before the
    horizon's end (or its UNTIL, if sooner) that stepping to it takes more than
    limit.MAX_ICS_RULE_STEPS steps."""
    for event in events:
        rules = event.get("RRULE")
        if rules is not None:
            for rule in rules if isinstance(rules, list) else [rules]:
                _refuse_rule(event, rule, _event_start(event), last)


def _refuse_rule(event: Any, rule: Any, start: date, last: date) -> None:
    freq = str((rule.get("FREQ") or [""])[0]).upper() or "(none)"
    finer = [part for part in ("BYHOUR", "BYMINUTE", "BYSECOND") if len(rule.get(part) or ()) > 1]
    if freq in ("SECONDLY", "MINUTELY", "HOURLY") or finer:
        what = f"FREQ={freq}" if not finer else f"{finer[0]} with several values"
        raise InvalidCalendar(
            f"the iCalendar event {_label(event)} repeats within a day ({what}): a calendar "
            "holds dates, give a rule of FREQ=DAILY or longer"
        )
    if freq not in _STEP:
        raise InvalidCalendar(f"the iCalendar event {_label(event)} has a rule of FREQ={freq}")
    until = (rule.get("UNTIL") or [None])[0]
    if isinstance(until, date):
        last = min(last, until.date() if isinstance(until, datetime) else until)
    interval = max(1, int((rule.get("INTERVAL") or [1])[0]))
    steps = (last - start) // (_STEP[freq] * interval)
    if steps > limit.MAX_ICS_RULE_STEPS:
        raise InvalidCalendar(
            f"the iCalendar event {_label(event)} repeats FREQ={freq} from {start}: {steps:,} "
            f"steps to {last}, more than {limit.MAX_ICS_RULE_STEPS:,}; give a later DTSTART"
        )


def _label(event: Any) -> str:
    uid = str(event.get("UID") or "")[:60]
    return repr(uid) if uid else "without a UID"


def _by_uid(parsed: Any, events: list[Any]) -> Iterable[Any]:
    """A query (recurring_ical_events) per event: its UID's components (the series and its
    changed occurrences, RECURRENCE-ID) with the file's time zones, so that one event's
    occurrences are expanded and counted before the next's are."""
    import icalendar
    import recurring_ical_events

    groups: dict[str, list[Any]] = {}
    for index, event in enumerate(events):
        groups.setdefault(str(event.get("UID") or f"#{index}"), []).append(event)
    zones = parsed.walk("VTIMEZONE")
    for group in groups.values():
        one = icalendar.Calendar()
        for component in [*zones, *group]:
            one.add_component(component)
        yield recurring_ical_events.of(one)


def _too_often() -> str:
    return (
        f"the iCalendar file's events occur more than {limit.MAX_ICS_OCCURRENCES:,} times "
        "within the dates it is read over: a calendar holds dates, not a timetable"
    )


def _event_start(event: object) -> date:
    start = event["DTSTART"].dt  # type: ignore[index]
    return start.date() if isinstance(start, datetime) else start


def _event_days(event: object, first: date, last: date) -> Iterable[date]:
    """The dates one (expanded) event covers, within [first, last]."""
    start = event["DTSTART"].dt  # type: ignore[index]
    end_prop = event.get("DTEND")  # type: ignore[attr-defined]
    end = end_prop.dt if end_prop is not None else None
    if end is None and event.get("DURATION") is not None:  # type: ignore[attr-defined]
        end = start + event["DURATION"].dt  # type: ignore[index]
    if isinstance(start, datetime):
        end = end if isinstance(end, datetime) else start
        low, high = start.date(), (end - _MICROSECOND).date() if end > start else start.date()
    else:
        end = end if isinstance(end, date) and not isinstance(end, datetime) else start + DAY
        low, high = start, max(start, end - DAY)
    day = max(low, first)
    while day <= min(high, last):
        yield day
        day += DAY


def _bounded(days: list[date], kind: str, span: tuple[date, date] | None) -> CalendarDates:
    if len(days) > limit.MAX_CALENDAR_DATES:
        raise InvalidCalendar(_too_many(len(days)))
    first, last = span if span is not None else (days[0], days[-1])
    return CalendarDates(tuple(days), kind, first, last)


def _too_many(count: int) -> str:
    return f"the calendar would hold {count:,} dates; the limit is {limit.MAX_CALENDAR_DATES:,}"


# -- which firings a calendar excludes ---------------------------------------------------------


def read_window(first: datetime, last: datetime) -> tuple[date, date]:
    """The dates to read for the firings from `first` to `last`: every local date, in any zone
    (a local date is within a day of the UTC one). The dispatcher reads its due firings', from
    the oldest to now; `tasks next` to RUN_HORIZON past now."""
    return first.astimezone(UTC).date() - DAY, last.astimezone(UTC).date() + DAY


@dataclass(frozen=True)
class Exclusion:
    """The dates a task's calendars exclude, read for one dispatch (`days`: local dates in
    `zone`, the task's); the search for the end of an excluded run stops at `horizon`."""

    zone: str
    days: frozenset[date]
    horizon: datetime

    def excludes(self, at: datetime) -> bool:
        return at.astimezone(ZoneInfo(self.zone)).date() in self.days


@dataclass(frozen=True)
class ExcludedRun:
    """Consecutive excluded firings from `first` to `last` (`count` of them, exact unless past
    COUNT_CAP), and the task's next firing after them (None: the schedule ends)."""

    first: datetime
    last: datetime
    count: int
    exact: bool
    next_firing: datetime | None


def excluded_run(schedule: Schedule, exclusion: Exclusion, first: datetime) -> ExcludedRun:
    """The run of consecutive excluded firings that starts at `first` (excluded): it jumps a
    whole excluded date at a time to the first firing on a date not excluded, so a holiday of an
    every-minute task costs a few schedule steps, not 1,440. Stops at `exclusion.horizon`: the
    run ends before it, and its next firing (the first at or after it, excluded or not) is
    judged when it falls due."""
    zone = ZoneInfo(exclusion.zone)
    cursor = first
    while True:
        day = cursor.astimezone(zone).date()
        while day in exclusion.days:
            day += DAY
        # The first instant of `day` in the zone (fold 0: a midnight in a gap is its end).
        boundary = datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)
        if boundary >= exclusion.horizon:
            boundary = exclusion.horizon
            following = schedule.next_after(boundary - _MICROSECOND)
            break
        following = schedule.next_after(boundary - _MICROSECOND)
        if following is None or not exclusion.excludes(following):
            break
        cursor = following
    end = boundary - _MICROSECOND
    count, exact = schedule.count_between(first, end, COUNT_CAP)
    if schedule.next_after(first - _MICROSECOND) != first:
        count += 1  # `first` (a task's next_run_at) is due even if not a fire time
    last = schedule.prev_at_or_before(end)
    last = first if last is None or last < first else last
    return ExcludedRun(first, last, max(count, 1), exact, following)


@dataclass(frozen=True)
class Calendar(FromRow):
    """A stored calendar as `calendars list/show` show it (`days` and `tasks` only by `show`:
    its dates in order and the live tasks that name it)."""

    id: int
    name: str
    source_kind: str
    first_day: date | None
    last_day: date | None
    created_at: datetime
    updated_at: datetime
    date_count: int | None = None
    task_count: int | None = None
    days: tuple[date, ...] | None = None
    tasks: tuple[str, ...] | None = None
