"""`scheduler-daemon calendars …`: exclusion calendars, named sets of local dates a task's
`--exclude-calendar` skips (ADR 0025; parsing and printing only)."""

from pathlib import Path
from typing import Any

import click

from scheduler_daemon.cli import output
from scheduler_daemon.cli.base import cli, client_for, emit, json_option
from scheduler_daemon.domain import calendar as calendars_domain
from scheduler_daemon.domain import limit
from scheduler_daemon.domain.calendar import Calendar, InvalidCalendar


@cli.group()
def calendars() -> None:
    """Exclusion calendars: dates on which a task's firings are skipped (`excluded`)."""


def calendar_fields(found: Calendar) -> dict[str, Any]:
    """The documented calendar object (`days` and `tasks` from `calendars show` only)."""
    fields: dict[str, Any] = {
        "id": found.id,
        "name": found.name,
        "source_kind": found.source_kind,
        "first_day": None if found.first_day is None else found.first_day.isoformat(),
        "last_day": None if found.last_day is None else found.last_day.isoformat(),
        "date_count": found.date_count,
        "created_at": found.created_at.isoformat(),
        "updated_at": found.updated_at.isoformat(),
    }
    if found.task_count is not None:
        fields["task_count"] = found.task_count
    if found.days is not None:
        fields["days"] = [d.isoformat() for d in found.days]
    if found.tasks is not None:
        fields["tasks"] = list(found.tasks)
    return fields


@calendars.command("add")
@click.argument("name")
@click.option("--date", "dates", multiple=True, metavar="YYYY-MM-DD", help="An excluded date.")
@click.option(
    "--range", "ranges", multiple=True, metavar="A..B", help="Excluded dates, both included."
)
@click.option(
    "--ics",
    "ics",
    type=click.Path(dir_okay=False),
    help="An iCalendar file: its events' dates, recurring ones expanded over a year before "
    f"today to {calendars_domain.ICS_YEARS} years after it.",
)
@click.option("--replace", is_flag=True, help="Rewrite the dates of an existing calendar.")
@json_option
@click.pass_context
def calendars_add(
    ctx: click.Context,
    name: str,
    *,
    dates: tuple[str, ...],
    ranges: tuple[str, ...],
    ics: str | None,
    replace: bool,
) -> None:
    """Add a calendar (or with --replace, rewrite one): its tasks skip these dates from their
    next dispatch."""
    calendars_domain.check_name(name)
    if ics is not None and (dates or ranges):
        raise InvalidCalendar("give --ics, or --date and --range, not both")
    client = client_for(ctx)
    if ics is None:
        given = calendars_domain.from_dates(dates, ranges)
    else:
        given = client.ics_dates(_read(ics))  # in a child process, bounded
    emit(ctx, calendar_fields(client.add_calendar(name, given, replace=replace)), _summary(name))


def _summary(name: str) -> str:
    return f"calendar {name} written"


def _read(path: str) -> bytes:
    """The file's bytes, at most one past the limit (from_ics refuses a bigger one)."""
    try:
        with Path(path).open("rb") as f:
            return f.read(limit.MAX_ICS_BYTES + 1)
    except OSError as exc:
        raise InvalidCalendar(f"--ics {path}: cannot read it ({exc.strerror})") from None


@calendars.command("list")
@json_option
@click.pass_context
def calendars_list(ctx: click.Context) -> None:
    """List the calendars by name."""
    rows = [calendar_fields(c) for c in client_for(ctx).list_calendars()]
    columns = ("name", "source_kind", "date_count", "first_day", "last_day", "task_count")
    emit(ctx, rows, output.table(rows, columns))


@calendars.command("show")
@click.argument("name")
@json_option
@click.pass_context
def calendars_show(ctx: click.Context, name: str) -> None:
    """Show one calendar: its dates and the tasks that name it."""
    fields = calendar_fields(client_for(ctx).get_calendar(name))
    text = {**fields, "days": " ".join(fields["days"]), "tasks": ", ".join(fields["tasks"])}
    emit(ctx, fields, output.pairs(text))


@calendars.command("delete")
@click.argument("name")
@json_option
@click.pass_context
def calendars_delete(ctx: click.Context, name: str) -> None:
    """Delete a calendar; refused while a task names it."""
    client_for(ctx).delete_calendar(name)
    emit(ctx, {"deleted": name}, f"deleted calendar {name}")
