"""`scheduler-daemon prune`: delete the history past its retention now (parsing and printing
only; operations.prune and the Pruner do the work)."""

import click

from scheduler_daemon.cli.base import cli, emit, json_option
from scheduler_daemon.domain.duration import format_duration
from scheduler_daemon.settings import resolve_database_url


@cli.command("prune")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@json_option
@click.pass_context
def prune(ctx: click.Context, dry_run: bool) -> None:
    """Delete finished occurrences and their runs older than the history retention (the fleet's
    `history-retention`, or a task's own), in the daemons' short batches; each task keeps its
    latest outcome. Safe while daemons run (they prune a few batches per reconcile pass)."""
    from scheduler_daemon.operations import prune as prune_history

    report = prune_history(resolve_database_url(ctx.obj["database_url"]), dry_run=dry_run)
    retention = None if report.retention is None else format_duration(report.retention)
    data = {
        "dry_run": dry_run,
        "history_retention": retention,
        "occurrences": report.occurrences,
        "runs": report.runs,
        "batches": report.batches,
    }
    verb = "would delete" if dry_run else "deleted"
    emit(
        ctx,
        data,
        f"prune {verb} {report.occurrences} occurrence(s) and {report.runs} run(s) "
        f"(history-retention: {retention or 'none'}; task overrides apply)",
    )
