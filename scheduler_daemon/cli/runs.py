"""`scheduler-daemon runs …`: run history and cancellation (parsing and printing only)."""

import time
from collections.abc import Callable
from typing import Any

import click

from scheduler_daemon import presentation
from scheduler_daemon.cli import output
from scheduler_daemon.cli.base import (
    EXIT_RUN_NOT_SUCCESSFUL,
    cli,
    client_for,
    emit,
    hint_more,
    json_option,
    operator,
    paging_options,
    who,
)
from scheduler_daemon.domain.followed_output import unseen_output


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


def run_or_occurrence(f: Callable[..., Any]) -> Callable[..., Any]:
    """The ID argument of `runs show` and `runs cancel`: a run's id, or an occurrence's with
    --occurrence."""
    f = click.option("--occurrence", is_flag=True, help="ID is an occurrence id, not a run id.")(f)
    return click.argument("ident", type=int, metavar="ID")(f)


@runs.command("show")
@run_or_occurrence
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


FOLLOW_POLL_SECONDS = 0.5
"""How often `runs logs -f` reads the run (it marks it followed at most once a second)."""


@runs.command("logs")
@click.argument("ident", type=int, metavar="ID")
@click.option(
    "-f", "--follow", is_flag=True, help="Follow a running run until it ends (Ctrl-C to stop)."
)
@json_option
@click.pass_context
def runs_logs(ctx: click.Context, ident: int, follow: bool) -> None:
    """A run's output (the last 64 KiB); with -f, a running run's output as it is written, until
    the run ends: exit 0 when it succeeded, 10 otherwise."""
    if follow and ctx.obj["json"]:
        raise click.UsageError("--json shows the output once: use it without -f")
    client = client_for(ctx)
    if not follow:
        run = client.run_output(ident)
        if ctx.obj["json"]:
            emit(ctx, presentation.run_output_fields(run), "")
            return
        _write(run.output_tail or "")
        if run.status == "running":
            click.echo(
                f"run {ident} is running; its output shows here when it ends, or as it is "
                f"written while followed: runs logs -f {ident}",
                err=True,
            )
        return
    shown, told = "", False
    while True:
        run, marked = client.follow_run(ident)
        if not marked and not told and run.status == "running":
            told = True
            click.echo(
                f"this role may not mark run {ident} followed (UPDATE on run): its output "
                "shows when it ends; the operator role can follow it as it is written",
                err=True,
            )
        text = run.output_tail or ""
        _write(unseen_output(shown, text))
        shown = text or shown
        if run.status != "running":
            break
        time.sleep(FOLLOW_POLL_SECONDS)
    if run.status != "success":
        summary = presentation.error_summary(run.status, run.exit_code, run.http_status, run.error)
        ended = f"run {ident} ended {run.status}" + (f": {summary}" if summary else "")
        click.echo(output.printable(ended), err=True)
        ctx.exit(EXIT_RUN_NOT_SUCCESSFUL)


def _write(text: str) -> None:
    """A job's output as it is, its control characters escaped (newline and tab kept)."""
    if text:
        click.echo(output.printable(text), nl=False)


@runs.command("cancel")
@run_or_occurrence
@json_option
@click.pass_context
def runs_cancel(ctx: click.Context, ident: int, occurrence: bool) -> None:
    """Cancel a run (its occurrence). A queued one ends at once; for a running one the owner
    stops the job at its next renewal, and the occurrence ends `cancelled` (keeping its slot
    until then) once the job is confirmed gone."""
    client = client_for(ctx)
    done = client.cancel(ident, occurrence=occurrence, requested_by=who(), actor=operator())
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
