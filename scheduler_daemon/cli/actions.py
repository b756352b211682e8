"""`scheduler-daemon actions`: the record of operators' actions, newest first (parsing and
printing only; the Client reads it)."""

import click

from scheduler_daemon.cli.base import cli, client_for, emit, json_option
from scheduler_daemon.cli.output import table
from scheduler_daemon.presentation import action_fields

ACTION_COLUMNS = (
    "id",
    "at",
    "actor",
    "session_role",
    "action",
    "source",
    "task_name",
    "occurrence_id",
    "detail",
)


@cli.command("actions")
@click.option("--task", "task_ref", metavar="TASK", help="Only the actions on this task.")
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    default=50,
    show_default=True,
    help="At most this many, newest first.",
)
@json_option
@click.pass_context
def actions(ctx: click.Context, task_ref: str | None, limit: int) -> None:
    """The operators' actions (trigger, pause, resume, cancel, backfill), newest first: who the
    CLI or console says acted (`actor`) and the database role that wrote the row
    (`session_role`, set by the database whatever the writer says)."""
    client = client_for(ctx)
    task_id = None if task_ref is None else client.get_task(task_ref).id
    rows = [action_fields(a) for a in client.recent_actions(task_id=task_id, limit=limit)]
    emit(ctx, rows, table(rows, ACTION_COLUMNS) if rows else "no actions recorded")
