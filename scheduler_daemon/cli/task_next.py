"""`scheduler-daemon tasks next`: a task's next fire times, past its calendars' excluded dates
(parsing and printing only)."""

import click

from scheduler_daemon import presentation
from scheduler_daemon.cli import output
from scheduler_daemon.cli.base import client_for, emit, json_option
from scheduler_daemon.cli.tasks import tasks
from scheduler_daemon.domain.spread import spread_start


@tasks.command("next")
@click.argument("task")
@click.option("-n", "count", type=int, default=5, show_default=True)
@json_option
@click.pass_context
def tasks_next(ctx: click.Context, task: str, count: int) -> None:
    """The next fire times, in the task's zone and in UTC; a task with --exclude-calendar
    skips the firings its calendars exclude and says how many it passed over."""
    client = client_for(ctx)
    record = client.get_task(task)
    spread, calendars = record.spec.spread, bool(record.spec.exclude_calendars)
    rows, passed, by = [], 0, set[str]()
    for firing in client.next_firings(record.id, count):
        row = presentation.fire_time_fields(
            firing.at, record.spec.timezone, spread_start(record.id, firing.at, spread)
        )
        if calendars:  # the excluded firings passed over just before it, and whose dates
            row |= {"excluded_before": firing.excluded_before, "excluded_by": firing.excluded_by}
            passed, by = passed + firing.excluded_before, by | set(firing.excluded_by)
        rows.append(row)
    columns = ("local", "utc", "start_local", "start_utc") if spread else ("local", "utc")
    text = output.table(rows, (*columns, "excluded_before") if calendars else columns)
    if passed:
        text += "\n" + presentation.excluded_note(passed, by)
    emit(ctx, rows, text)
