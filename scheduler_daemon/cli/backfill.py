"""`scheduler-daemon tasks backfill`: queue the firings of a past range again (parsing and
printing only; Client.backfill does the work)."""

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import click

from scheduler_daemon import presentation
from scheduler_daemon.backfill import BackfillResult
from scheduler_daemon.cli.base import client_for, emit, json_option, operator, who
from scheduler_daemon.cli.tasks import tasks
from scheduler_daemon.domain import backfill

PROGRESS_FROM = 1_000  # firings: a smaller range is done before a bar would be worth drawing


@tasks.command("backfill")
@click.argument("task")
@click.option(
    "--from",
    "start",
    required=True,
    metavar="INSTANT",
    help="First instant (ISO 8601; without an offset: in the task's zone).",
)
@click.option("--to", "end", required=True, metavar="INSTANT", help="Last instant, inclusive.")
@click.option(
    "--include",
    metavar="OUTCOMES",
    help=f"Latest outcomes to queue again, comma-separated, of: {', '.join(backfill.CHOICES)}. "
    "Default: all but success.",
)
@click.option("--dry-run", is_flag=True, help="List the firings and what would be queued.")
@click.option(
    "--max",
    "max_firings",
    type=int,
    default=backfill.DEFAULT_MAX,
    show_default=True,
    help="Refuse a range with more firings than this.",
)
@json_option
@click.pass_context
def tasks_backfill(
    ctx: click.Context,
    task: str,
    *,
    start: str,
    end: str,
    include: str | None,
    dry_run: bool,
    max_firings: int,
) -> None:
    """Queue one `backfill` occurrence per firing of [--from, --to] (the task's schedule, zone
    and DST policies) whose latest outcome is in --include. Idempotent: a firing gets at most
    one backfill occurrence."""
    chosen = backfill.parse_include(include)
    client = client_for(ctx)
    record = client.get_task(task)
    zone = record.spec.timezone
    with _progress_bar(ctx) as progress:
        result = client.backfill(
            record.id,
            start=backfill.range_instant("--from", start, zone),
            end=backfill.range_instant("--to", end, zone),
            include=chosen,
            max_firings=max_firings,
            dry_run=dry_run,
            requested_by=who(),
            actor=operator(),
            progress=progress,
        )
    data, text = _report(result, chosen, zone)
    emit(ctx, data, text)


@contextlib.contextmanager
def _progress_bar(ctx: click.Context) -> Iterator[Callable[[int, int], None]]:
    """A `progress(done, total)` that draws a bar on a terminal's stderr once a range is long
    enough to be worth one (not with --json); the bar is closed on the way out."""
    bar: Any = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            if total < PROGRESS_FROM or ctx.obj["json"] or not sys.stderr.isatty():
                return
            bar = click.progressbar(length=total, label="backfill", file=sys.stderr)
            bar.__enter__()
        bar.update(done)

    try:
        yield progress
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)


def _report(
    result: BackfillResult, chosen: tuple[str, ...], zone: str
) -> tuple[dict[str, Any], str]:
    """What `tasks backfill` prints: its JSON fields and its text (a dry run lists the firings)."""
    data: dict[str, Any] = {
        "task_id": result.task_id,
        "task_name": result.task_name,
        "dry_run": result.dry_run,
        "firings": len(result.firings),
        "wanted": len(result.wanted),
        "occurrence_ids": result.occurrence_ids,
    }
    if not result.dry_run:
        text = (
            f"queued {len(result.occurrence_ids)} backfill occurrence(s) of task "
            f"{result.task_name} ({len(result.firings)} firing(s) in the range)"
        )
        return data, text
    data["firing_list"] = [
        {
            "scheduled_for": presentation.iso(f.scheduled_for),
            "outcome": f.outcome,
            "backfilled": f.backfilled,
            "queue": f.wanted(chosen),
        }
        for f in result.firings
    ]
    lines = [
        f"{presentation.fire_time_fields(f.scheduled_for, zone, None)['local']}  {f.outcome}"
        + ("  (has a backfill occurrence)" if f.backfilled else "")
        + ("  -> queue" if f.wanted(chosen) else "")
        for f in result.firings
    ]
    text = "\n".join(
        [
            *lines,
            f"dry run: {len(result.wanted)} of {len(result.firings)} firings would be "
            f"queued for task {result.task_name}",
        ]
    )
    return data, text
