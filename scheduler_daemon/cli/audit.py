"""`scheduler-daemon audit`: check the recorded history against the invariants (parsing and
printing only; operations.audit and the Auditor do the work)."""

from datetime import UTC, datetime, timedelta
from typing import Any

import click

from scheduler_daemon import presentation
from scheduler_daemon.cli.base import DURATION_OR_ZERO, cli, emit, json_option
from scheduler_daemon.domain import limit
from scheduler_daemon.domain.audit import CHECK_NAMES, DEFAULT_SETTLE
from scheduler_daemon.domain.duration import format_duration, parse_duration
from scheduler_daemon.settings import resolve_database_url

EXIT_VIOLATIONS = 1


class TimeBoundType(click.ParamType):
    """An ISO 8601 instant (without an offset: UTC), or a duration meaning that long ago."""

    name = "instant|duration"

    def convert(self, value: Any, param: Any, ctx: Any) -> datetime | timedelta:
        if not isinstance(value, str):
            return value
        try:
            return limit.duration("duration", parse_duration(value))
        except ValueError as exc:  # OutOfBounds too
            why = str(exc)
        try:
            instant = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            self.fail(
                f"{value!r} is neither an ISO 8601 instant such as 2030-01-01T09:00Z nor a "
                f"duration such as 30m ({why})",
                param,
                ctx,
            )
        return instant if instant.tzinfo else instant.replace(tzinfo=UTC)


TIME_BOUND = TimeBoundType()


@cli.command("audit")
@click.option(
    "--since",
    type=TIME_BOUND,
    default=None,
    help="Check history from this instant, or from this long ago (30m). Default: all of it.",
)
@click.option(
    "--until",
    type=TIME_BOUND,
    default=None,
    help="Owe firings up to this instant or this long ago (default: now), minus --settle.",
)
@click.option(
    "--settle",
    type=DURATION_OR_ZERO,
    default=format_duration(DEFAULT_SETTLE),
    show_default=True,
    help="Firings this close to --until are not owed yet.",
)
@click.option(
    "--check",
    "checks",
    multiple=True,
    type=click.Choice(CHECK_NAMES),
    help="Run only this check (repeatable). Default: all.",
)
@json_option
@click.pass_context
def audit(
    ctx: click.Context,
    since: datetime | timedelta | None,
    until: datetime | timedelta | None,
    settle: timedelta,
    checks: tuple[str, ...],
) -> None:
    """Read tasks, occurrences and runs and report every violated invariant with the rows
    involved; exit 1 when there is any. Read-only and safe while daemons run."""
    from scheduler_daemon.operations import audit as run_audit
    from scheduler_daemon.services.auditor import InvalidWindow

    url = resolve_database_url(ctx.obj["database_url"])
    try:
        report = run_audit(
            url, since=since, until=until, settle=settle, checks=checks or CHECK_NAMES
        )
    except InvalidWindow as exc:
        raise click.UsageError(str(exc)) from exc
    emit(ctx, presentation.audit_fields(report), presentation.audit_text(report))
    ctx.exit(0 if report.ok else EXIT_VIOLATIONS)
