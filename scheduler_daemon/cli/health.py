"""`scheduler-daemon tasks health`: each task's verdict and figures over a window (parsing and
printing only)."""

from datetime import timedelta

import click

from scheduler_daemon import presentation
from scheduler_daemon.cli import output
from scheduler_daemon.cli.base import (
    DURATION,
    client_for,
    emit,
    hint_more,
    json_option,
    paging_options,
)
from scheduler_daemon.cli.tasks import tasks
from scheduler_daemon.domain.health import FAILING_ATTEMPTS


def _text(fields: dict[str, object]) -> str:
    """One task's health as `key: value` lines, the reason maps in words."""
    shown = {
        k: ", ".join(f"{r} {n}" for r, n in v.items()) if isinstance(v, dict) else v
        for k, v in fields.items()
    }
    return output.pairs(shown)


@tasks.command("health")
@click.argument("name", required=False)
@click.option(
    "--window",
    type=DURATION,
    default="24h",
    show_default=True,
    help="Look back this far from now (at most 31 days).",
)
@click.option(
    "--failing-after",
    type=int,
    default=FAILING_ATTEMPTS,
    show_default=True,
    help="`failing` when this many newest finished attempts failed or timed out.",
)
@paging_options
@json_option
@click.pass_context
def tasks_health(
    ctx: click.Context,
    *,
    name: str | None,
    window: timedelta,
    failing_after: int,
    limit: int,
    all_rows: bool,
    after: str | None,
) -> None:
    """Each task's verdict over a window, unhealthy first (or one task's, with NAME)."""
    client = client_for(ctx)
    if name is not None:
        report = client.task_health(name, window=window, attempts=failing_after)
        fields = presentation.health_fields(report)
        emit(ctx, fields, _text(fields))
        return
    page = client.health_page(
        window=window, limit=None if all_rows else limit, after=after, attempts=failing_after
    )
    rows = [presentation.health_fields(r) for r in page.rows]
    emit(ctx, rows, output.table(rows, output.HEALTH_COLUMNS))
    hint_more(page.after)
