"""The root `scheduler-daemon` group, the shared option types and output helpers."""

import getpass
import json
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from scheduler_daemon.cli.output import printable
from scheduler_daemon.domain import limit
from scheduler_daemon.domain.duration import parse_duration
from scheduler_daemon.logconfig import LEVELS, configure
from scheduler_daemon.settings import (
    DATABASE_URL_ENV,
    resolve_database_url,
)
from scheduler_daemon.version import __version__

if TYPE_CHECKING:
    from scheduler_daemon.client import Client
    from scheduler_daemon.domain.operator import Actor

EXIT_UNAVAILABLE = 1
EXIT_BAD_INPUT = 2
# 3 is EXIT_FAILED_PASSES (runtime/supervision.py).
# Schema compatibility (ADR 0002, docs/upgrading.md):
EXIT_SCHEMA_BEHIND = 4
"""The schema lacks a step this build needs: run `scheduler-daemon migrate`."""
EXIT_SCHEMA_TOO_NEW = 5
"""The schema is past what this build can work with (a contract ran): upgrade this build."""
EXIT_CONTRACT_BLOCKED = 6
"""`migrate --contract` refused: an instance of an older build is still registered."""
# 7 is EXIT_LEASE_KEEPER_FAILED (runtime/supervision.py).
EXIT_RUN_NOT_SUCCESSFUL = 10
"""`runs logs -f`: the followed run ended other than `success`."""
EXIT_CONSOLE_UNAVAILABLE = 11
"""`console`: the `console` extra is not installed, or the address cannot be listened on."""
EXIT_SCHEMA_SHAPE = 12
"""The schema is at a revision this build knows, but of another shape (ADR 0027, "as built"):
made by another unreleased build, or changed by hand. Not 4 (`migrate` cannot help, and a
supervisor restarting on 4 would loop), nor 5 (a newer build does not help either)."""
EXIT_UPKEEP_GAVE_UP = 13
"""`partitions --upkeep`: the upkeep gave up (a lock held past its 100 ms lock_timeout, or
another error), its work undone; the next run tries again (ADR 0033)."""


class Duration(click.ParamType):
    """A duration as domain.duration parses it, within domain/limit.py's bounds (1 ms to 100
    years); `allow_zero` for the options where 0 means something (docs/cli.md lists them),
    every other one refuses it."""

    name = "duration"

    def __init__(self, *, allow_zero: bool = False) -> None:
        self.allow_zero = allow_zero

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            parsed = parse_duration(value, allow_zero=self.allow_zero)
            return limit.duration("duration", parsed, allow_zero=self.allow_zero)
        except ValueError as exc:  # OutOfBounds too
            self.fail(str(exc), param, ctx)


DURATION = Duration()
DURATION_OR_ZERO = Duration(allow_zero=True)
CLEAR = object()  # `tasks update --timeout none`: unset an optional value


class Clearable(click.ParamType):
    """An optional value that `tasks update` can clear with the word `none`."""

    def __init__(self, inner: click.ParamType) -> None:
        self.inner = inner
        self.name = f"{inner.name}|none"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, str) and value.lower() == "none":
            return CLEAR
        return self.inner.convert(value, param, ctx)


def who() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


def operator() -> "Actor":
    """This user@host, from the CLI: the actor `operator_action` records beside each trigger,
    pause, resume, cancel and backfill, in the action's own transaction."""
    from scheduler_daemon.domain.operator import Actor

    return Actor(who(), "cli")


def emit(ctx: click.Context, data: Any, text: str) -> None:
    """`data` as JSON with --json (control characters escaped by JSON itself), else `text` with
    every control and format character but newline and tab escaped: a job's output or error,
    or a name, cannot move the cursor or recolour the terminal."""
    click.echo(json.dumps(data, indent=2, default=str) if ctx.obj["json"] else printable(text))


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def paging_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """`--limit`, `--all` and `--after` of the commands that list a page at a time."""
    from scheduler_daemon.client import PAGE_SIZE

    for option in reversed(
        [
            click.option(
                "--limit",
                type=click.IntRange(min=1),
                default=PAGE_SIZE,
                show_default=True,
                help="Rows in the page.",
            ),
            click.option("--all", "all_rows", is_flag=True, help="Every row, not a page."),
            click.option(
                "--after",
                metavar="CURSOR",
                help="Continue after this cursor (printed on stderr when more rows exist).",
            ),
        ]
    ):
        f = option(f)
    return f


def hint_more(after: str | None) -> None:
    """On a terminal, one line on stderr when the page did not hold every row."""
    if after is not None and stderr_is_terminal():
        click.echo(f"more rows: --after {after} (or --all)", err=True)


def client_for(ctx: click.Context) -> "Client":
    from scheduler_daemon.client import Client

    client = Client(resolve_database_url(ctx.obj["database_url"]))
    ctx.call_on_close(client.close)
    return client


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--database-url",
    envvar=DATABASE_URL_ENV,
    metavar="URL",
    help=f"PostgreSQL URL (or {DATABASE_URL_ENV}); unset: the embedded server.",
)
@click.option(
    "--log-level",
    envvar="SCHEDULER_LOG_LEVEL",
    default="info",
    type=click.Choice(LEVELS),
    show_default=True,
)
@click.option(
    "--log-format",
    envvar="SCHEDULER_LOG_FORMAT",
    default="auto",
    type=click.Choice(["auto", "json", "console"]),
    show_default=True,
)
@click.version_option(__version__, prog_name="scheduler-daemon")
@click.pass_context
def cli(ctx: click.Context, database_url: str | None, log_level: str, log_format: str) -> None:
    """Durable cron for a fleet: tasks in PostgreSQL, run by whichever daemon is alive."""
    configure(log_level, log_format)
    ctx.obj = {"database_url": database_url, "json": False}


def json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    def store(ctx: click.Context, _: Any, value: bool) -> bool:
        ctx.obj["json"] = value
        return value

    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        expose_value=False,
        callback=store,
        help="Print JSON with the field names documented in docs/cli.md.",
    )(f)
