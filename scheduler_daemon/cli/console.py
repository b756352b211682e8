"""`scheduler-daemon console`: the web console's process (parsing and starting only; the
`console` extra's package does the work, ADR 0018)."""

import os
import socket
from pathlib import Path

import click

from scheduler_daemon.cli.base import EXIT_CONSOLE_UNAVAILABLE, cli
from scheduler_daemon.settings import resolve_database_url

TOKEN_ENV = "SCHEDULER_CONSOLE_TOKEN"  # noqa: S105 - a variable's name, not a secret
MAX_TOKEN_BYTES = 4096


def read_token(token_file: Path | None) -> str | None:
    """The console token from --token-file, else SCHEDULER_CONSOLE_TOKEN (never argv): one line,
    surrounding whitespace dropped; empty or oversized is a usage error."""
    if token_file is not None:
        try:
            raw = token_file.read_bytes()
        except OSError as exc:
            raise click.UsageError(f"--token-file {token_file}: {exc.strerror}") from None
        source = f"--token-file {token_file}"
    elif os.environ.get(TOKEN_ENV) is not None:
        raw, source = os.environ[TOKEN_ENV].encode(), TOKEN_ENV
    else:
        return None
    if len(raw) > MAX_TOKEN_BYTES:
        raise click.UsageError(f"{source}: the token is longer than {MAX_TOKEN_BYTES} bytes")
    try:
        token = raw.decode().strip()
    except UnicodeDecodeError:
        raise click.UsageError(f"{source}: the token is not UTF-8") from None
    if not token or not token.isprintable():
        raise click.UsageError(f"{source}: the token is empty or holds control characters")
    return token


@cli.command("console")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--bind", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--writes",
    is_flag=True,
    help="Enable actions (trigger, pause, resume, cancel, backfill); needs a token or "
    "--trust-header.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help=f"File holding the token operators sign in with (or {TOKEN_ENV}; never on argv).",
)
@click.option(
    "--trust-header",
    metavar="NAME",
    help="Take the operator's name from this request header, set by an authenticating proxy "
    "in front (safe only behind that proxy: docs/operators/console.md).",
)
@click.pass_context
def console(
    ctx: click.Context,
    *,
    port: int,
    bind: str,
    writes: bool,
    token_file: Path | None,
    trust_header: str | None,
) -> None:
    """Serve the web console: the fleet, tasks, runs and (with --writes) safe actions."""
    token = read_token(token_file)
    if trust_header is not None and (
        not trust_header.strip() or not trust_header.isascii() or ":" in trust_header
    ):
        raise click.UsageError(f"--trust-header {trust_header!r} is not a header name")
    if writes and token is None and trust_header is None:
        raise click.UsageError(
            f"--writes needs an operator: --token-file, {TOKEN_ENV} or --trust-header"
        )
    try:
        import uvicorn

        from scheduler_daemon.client import Client
        from scheduler_daemon.console.app import build_app
        from scheduler_daemon.console.guard import Guard
    except ImportError as exc:
        click.echo(
            f"error: the console needs the `console` extra (pip install "
            f"'scheduler-daemon[console]'): {exc}",
            err=True,
        )
        ctx.exit(EXIT_CONSOLE_UNAVAILABLE)
    url = resolve_database_url(ctx.obj["database_url"])
    from scheduler_daemon.storage import migration

    migration.raise_unless_compatible(migration.state(url).verdict)  # exit 4 or 5, as `run`
    try:
        sock = socket.create_server((bind, port))
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        click.echo(f"error: cannot listen on {bind}:{port}: {reason}", err=True)
        ctx.exit(EXIT_CONSOLE_UNAVAILABLE)
    client = Client(url)
    ctx.call_on_close(client.close)
    guard = Guard(writes=writes, token=token, trust_header=trust_header)
    import structlog

    host, bound_port = sock.getsockname()[:2]
    structlog.get_logger("scheduler_daemon.console").info(
        "console_started",
        url=f"http://{host}:{bound_port}/",
        writes=writes,
        sign_in="token" if token else ("header " + trust_header if trust_header else "none"),
    )
    config = uvicorn.Config(
        build_app(client, guard), log_config=None, access_log=False, log_level="warning"
    )
    uvicorn.Server(config).run(sockets=[sock])
