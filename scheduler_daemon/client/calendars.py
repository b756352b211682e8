"""The Client's exclusion calendars (ADR 0025): add (or replace), list, show and delete them,
and a task's next firings with its calendars' dates passed over (`tasks next`)."""

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from scheduler_daemon.client.base import ClientBase, found, task_ref
from scheduler_daemon.domain import argument
from scheduler_daemon.domain import limit as bound
from scheduler_daemon.domain.calendar import (
    RUN_HORIZON,
    Calendar,
    CalendarDates,
    Exclusion,
    InvalidCalendar,
    check_name,
    excluded_run,
    read_window,
)
from scheduler_daemon.domain.status import TaskStatus
from scheduler_daemon.ics_reader import read_ics
from scheduler_daemon.storage import calendar_store, task_store
from scheduler_daemon.storage.error import Conflict


@dataclass(frozen=True)
class NextFiring:
    """A firing `tasks next` shows, and the excluded firings it passed over just before it
    (`excluded_before` of them, on dates of the calendars `excluded_by`)."""

    at: datetime
    excluded_before: int = 0
    excluded_by: tuple[str, ...] = field(default=())


class Calendars(ClientBase):
    """Exclusion calendars: named sets of local dates that a task's `--exclude-calendar` names."""

    def add_calendar(
        self, name: str, dates: CalendarDates, *, replace: bool = False, now: datetime | None = None
    ) -> Calendar:
        """Creates calendar `name` with `dates` (domain.calendar.from_dates, or ics_dates); with
        `replace`, rewrites its dates if it exists (a task's next dispatch reads the new ones).
        Conflict, nothing written, if it exists and `replace` is false."""
        check_name(name)
        with self._tx() as conn:
            made = calendar_store.write(conn, name, dates, replace=replace, now=now)
            if made is None:
                raise Conflict(
                    f"a calendar named '{name}' already exists; --replace rewrites its dates"
                )
            return made

    def today(self, *, now: datetime | None = None) -> date:
        """The database's date (UTC), the day an iCalendar file is expanded from."""
        with self._tx() as conn:
            return task_store.clock(conn, now).astimezone(UTC).date()

    def ics_dates(self, data: bytes, *, now: datetime | None = None) -> CalendarDates:
        """An iCalendar file's dates (domain.calendar.from_ics) over the horizon from the
        database's today, read in a child process bounded in time and memory
        (scheduler_daemon.ics_reader): InvalidCalendar, one line, for a file refused or too
        costly to read, whatever its rules."""
        return read_ics(data, self.today(now=now))

    def list_calendars(self) -> list[Calendar]:
        with self._tx() as conn:
            return calendar_store.list_all(conn)

    def get_calendar(self, name: str) -> Calendar:
        with self._tx() as conn:
            calendar = calendar_store.find(conn, name)
        return found(calendar, f"calendar '{name}'")

    def delete_calendar(self, name: str) -> None:
        """Deletes a calendar; refused (Conflict, naming them) while a live task names it."""
        with self._tx() as conn:
            calendar_id, tasks = found(calendar_store.lock(conn, name), f"calendar '{name}'")
            if tasks:
                shown = ", ".join(tasks[:10]) + (
                    f" and {len(tasks) - 10} more" if len(tasks) > 10 else ""
                )
                raise Conflict(
                    f"calendar '{name}' is in use by task(s) {shown}; remove it from them first "
                    "(tasks update TASK --exclude-calendar none)"
                )
            calendar_store.delete(conn, calendar_id)

    def next_firings(
        self, ref: str | int, count: int = 5, *, now: datetime | None = None
    ) -> list[NextFiring]:
        """The next `count` firings after the database's now that no calendar of the task
        excludes, each with the excluded ones passed over before it (as the dispatcher jumps a
        run; past RUN_HORIZON the firings are shown as the schedule gives them)."""
        argument.count_within(count, "-n", bound.MAX_NEXT_COUNT)
        with self._tx() as conn:
            task = task_store.find(conn, task_ref(ref))
            db_now = task_store.clock(conn, now)
            named: dict[date, tuple[str, ...]] = {}
            if task.spec.exclude_calendars:
                low, high = read_window(db_now, db_now + RUN_HORIZON)
                named = calendar_store.named_days_for_task(conn, task.id, low, high)
        if task.status != TaskStatus.ENABLED:
            return []
        schedule = task.spec.schedule()
        exclusion = Exclusion(task.spec.timezone, frozenset(named), db_now + RUN_HORIZON)
        shown: list[NextFiring] = []
        passed, by = 0, set[str]()
        at = schedule.next_after(db_now)
        while at is not None and len(shown) < count:
            if at < exclusion.horizon and exclusion.excludes(at):
                run = excluded_run(schedule, exclusion, at)
                passed += run.count
                by.update(_names_between(named, run.first, run.last, exclusion))
                at = run.next_firing
                continue
            shown.append(NextFiring(at, passed, tuple(sorted(by))))
            passed, by = 0, set()
            at = schedule.next_after(at)
        return shown


def _names_between(
    named: dict[date, tuple[str, ...]], first: datetime, last: datetime, exclusion: Exclusion
) -> set[str]:
    """The calendars holding the local dates from `first` to `last` (a run's)."""
    from zoneinfo import ZoneInfo

    zone = ZoneInfo(exclusion.zone)
    day, end = first.astimezone(zone).date(), last.astimezone(zone).date()
    names: set[str] = set()
    while day <= end:
        names.update(named.get(day, ()))
        day += timedelta(days=1)
    return names


__all__ = ["Calendars", "InvalidCalendar", "NextFiring"]
