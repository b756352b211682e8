"""`scheduler-daemon partitions`: the history's partitions, and one upkeep of them on demand
(parsing and printing only; operations and the PartitionKeeper do the work, ADR 0033)."""

from typing import Any

import click

from scheduler_daemon.cli.base import EXIT_UPKEEP_GAVE_UP, cli, emit, json_option
from scheduler_daemon.cli.output import table
from scheduler_daemon.presentation import iso
from scheduler_daemon.settings import resolve_database_url

PARTITION_COLUMNS = ("table", "partition", "lower_bound", "upper_bound", "rows_estimate")


@cli.command("partitions")
@click.option(
    "--upkeep",
    is_flag=True,
    help="Run the partition upkeep once, as a daemon's reconcile step does, and print what it "
    "did (for a timer or CronJob, connected as the schema owner or the daemon role).",
)
@json_option
@click.pass_context
def partitions(ctx: click.Context, upkeep: bool) -> None:
    """The partitions of the history (`occurrence`, `run`): bounds and estimated rows; the
    DEFAULT partition (the active rows, and ended rows no dated partition covers) last."""
    from scheduler_daemon import operations
    from scheduler_daemon.services.partition_keeper import UpkeepFailed

    url = resolve_database_url(ctx.obj["database_url"])
    if not upkeep:
        rows = [_row(r) for r in operations.partitions(url)]
        emit(ctx, {"partitions": rows}, table(rows, PARTITION_COLUMNS) if rows else _NONE)
        return
    try:
        done = operations.partition_upkeep(url)
    except UpkeepFailed as exc:
        click.echo(f"error: partition upkeep gave up, nothing changed: {exc}", err=True)
        ctx.exit(EXIT_UPKEEP_GAVE_UP)
    emit(ctx, done, _upkeep_text(done))


_NONE = "history is not partitioned"


def _row(found: dict[str, Any]) -> dict[str, Any]:
    return {
        "table": found["table_name"],
        "partition": found["partition"],
        "default": found["is_default"],
        "lower_bound": "DEFAULT" if found["is_default"] else iso(found["lower_bound"]),
        "upper_bound": None if found["is_default"] else iso(found["upper_bound"]),
        "rows_estimate": found["rows_estimate"],
    }


def _upkeep_text(done: dict[str, Any]) -> str:
    if done.get("partitioned") is False:
        return f"{_NONE}: nothing to do"
    if done.get("busy"):
        return "another session is keeping the partitions up now: nothing done"
    created, dropped = done.get("created") or [], done.get("dropped") or []
    return (
        f"created {len(created)} partition(s), dropped {len(dropped)}; moved "
        f"{done.get('moved_rows', 0)} row(s) out of the DEFAULT partition, kept "
        f"{done.get('kept_rows', 0)} of the dropped partitions' rows; "
        f"{done.get('partitions_ahead')} partition(s) ahead"
        + "".join(f"\ncreated {name}" for name in created)
        + "".join(f"\ndropped {name}" for name in dropped)
    )
