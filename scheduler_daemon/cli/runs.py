"""`scheduler-daemon runs …`: run history and cancellation (parsing and printing only)."""

import click

from scheduler_daemon import presentation
from scheduler_daemon.cli import output
from scheduler_daemon.cli.base import (
    cli,
    client_for,
    emit,
    hint_more,
    json_option,
    paging_options,
    who,
)


# -- runs ----------------------------------------------------------------------------------------
@cli.group()
def runs() -> None:
    """Run history."""


@runs.command("list")
@click.option("--task", default=None, help="Task name or id (ids of deleted tasks too).")
@click.option("--status", default=None)
@paging_options
@json_option
@click.pass_context
def runs_list(
    ctx: click.Context,
    *,
    task: str | None,
    status: str | None,
    limit: int,
    all_rows: bool,
    after: str | None,
) -> None:
    """Newest occurrence first, a page at a time: one row per run attempt (newest first) under
    a row for an occurrence whose status its latest run does not show (never ran, or waits for
    its next attempt)."""
    page = client_for(ctx).runs_page(
        task=task, status=status, limit=None if all_rows else limit, after=after
    )
    rows = [presentation.run_fields(r) for r in page.rows]
    emit(ctx, rows, output.run_table(rows))
    hint_more(page.after)


@runs.command("show")
@click.argument("ident", type=int, metavar="ID")
@click.option("--occurrence", is_flag=True, help="ID is an occurrence id, not a run id.")
@json_option
@click.pass_context
def runs_show(ctx: click.Context, ident: int, occurrence: bool) -> None:
    """One run, or with --occurrence one occurrence and all its runs."""
    client = client_for(ctx)
    if occurrence:
        fields = presentation.occurrence_fields(*client.show_occurrence(ident))
        runs_text = output.run_table(fields["runs"]) if fields["runs"] else "(no runs)"
        plain = {k: v for k, v in fields.items() if k != "runs"}
        emit(ctx, fields, output.pairs(plain) + "\n\n" + runs_text)
    else:
        fields = presentation.run_detail_fields(client.show_run(ident))
        emit(ctx, fields, output.pairs(fields))


@runs.command("cancel")
@click.argument("ident", type=int, metavar="ID")
@click.option("--occurrence", is_flag=True, help="ID is an occurrence id, not a run id.")
@json_option
@click.pass_context
def runs_cancel(ctx: click.Context, ident: int, occurrence: bool) -> None:
    """Cancel a run (its occurrence). A queued one ends at once; for a running one the owner
    stops the job at its next renewal, and the occurrence ends `cancelled` (keeping its slot
    until then) once the job is confirmed gone."""
    done = client_for(ctx).cancel(ident, occurrence=occurrence, requested_by=who())
    row = done.occurrence
    fields = {
        **presentation.occurrence_fields(row),
        "cancel": done.cancel,
        "stop_within_seconds": done.stop_within_seconds,
        "takeover_at": presentation.iso(done.takeover_at),
    }
    if done.cancel == "cancelled":
        text = f"occurrence {row.id} cancelled"
    elif done.stop_within_seconds is not None:
        text = (
            f"occurrence {row.id}: cancel requested; the job is stopped within "
            f"{done.stop_within_seconds:g} s (its owner {row.claim_owner or 'holds it'}"
            " confirms before it is recorded cancelled)"
        )
    else:
        text = (
            f"occurrence {row.id}: cancel requested; its owner is not registered, so it "
            f"is ended at its takeover point {fields['takeover_at']}"
        )
    emit(ctx, fields, text)
