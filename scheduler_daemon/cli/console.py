"""`scheduler-daemon console`: the web console's process (parsing and starting only; the
`console` extra's package does the work, ADR 0018)."""

import ipaddress
import os
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

import click

from scheduler_daemon.cli.base import DURATION, EXIT_CONSOLE_UNAVAILABLE, cli
from scheduler_daemon.console.host import allowed_hosts, host_error, wildcard
from scheduler_daemon.settings import resolve_database_url

TOKEN_ENV = "SCHEDULER_CONSOLE_TOKEN"  # noqa: S105 - a variable's name, not a secret
MAX_TOKEN_BYTES = 4096
MIN_TOKEN_BYTES = 16


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
    if len(token.encode()) < MIN_TOKEN_BYTES:
        raise click.UsageError(  # not `SOURCE: ...`: the scrubber masks what follows `token:`
            f"the token from {source} is {len(token.encode())} bytes; it needs at least "
            f"{MIN_TOKEN_BYTES} (openssl rand -hex 32 makes one)"
        )
    return token


def hosts_for(bind: str, given: tuple[str, ...]) -> frozenset[str]:
    """The Host names the console answers to; a wildcard bind needs --allowed-host."""
    for name in given:
        if (why := host_error(name)) is not None:
            raise click.UsageError(f"--allowed-host {name!r}: {why}")
    if wildcard(bind) and not given:
        raise click.UsageError(
            f"--bind {bind} listens on every address: name the host names browsers use "
            "with --allowed-host (a DNS-rebinding site's name is refused)"
        )
    return allowed_hosts(bind, given)


def proxies(given: tuple[str, ...]) -> list[str]:
    """--forwarded-allow-ips: each an address or network (a proxy named, never `*`)."""
    for value in given:
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise click.UsageError(
                f"--forwarded-allow-ips {value!r}: not an IP address or network (name the proxy)"
            ) from None
    return list(given)


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
@click.option(
    "--allowed-host",
    "allowed_host",
    metavar="NAME",
    multiple=True,
    help="A Host name browsers reach the console by (repeatable; localhost, 127.0.0.1, ::1 "
    "and the --bind address always). Needed with a wildcard --bind.",
)
@click.option(
    "--session-lifetime",
    type=DURATION,
    default="12h",
    show_default=True,
    help="How long a token sign-in lasts.",
)
@click.option(
    "--forwarded-allow-ips",
    "forwarded_allow_ips",
    metavar="ADDRESS",
    multiple=True,
    help="The proxy (address or network; repeatable) whose X-Forwarded-For and "
    "X-Forwarded-Proto are believed; none by default.",
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
    allowed_host: tuple[str, ...],
    session_lifetime: timedelta,
    forwarded_allow_ips: tuple[str, ...],
) -> None:
    """Serve the web console: the fleet, tasks, runs and (with --writes) safe actions."""
    token = read_token(token_file)
    hosts = hosts_for(bind, allowed_host)
    trusted_proxies = proxies(forwarded_allow_ips)
    if trust_header is not None and (
        not trust_header.strip() or not trust_header.isascii() or ":" in trust_header
    ):
        raise click.UsageError(f"--trust-header {trust_header!r} is not a header name")
    if writes and token is None and trust_header is None:
        raise click.UsageError(
            f"--writes needs an operator: --token-file, {TOKEN_ENV} or --trust-header"
        )
    try:
        import uvicorn  # noqa: F401 - present with the `console` extra (serve() uses it)

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
    guard = Guard(
        writes=writes,
        token=token,
        trust_header=trust_header,
        allowed_hosts=hosts,
        session_lifetime=session_lifetime.total_seconds(),
    )
    serve(build_app(client, guard), sock, guard, trusted_proxies)


def serve(app: Any, sock: socket.socket, guard: Any, trusted_proxies: list[str]) -> None:
    """Logs `console_started` and serves `app` on `sock` until stopped."""
    import structlog
    import uvicorn

    host, bound_port = sock.getsockname()[:2]
    structlog.get_logger("scheduler_daemon.console").info(
        "console_started",
        url=f"http://{host}:{bound_port}/",
        writes=guard.writes,
        sign_in="token"
        if guard.token
        else ("header " + guard.trust_header if guard.trust_header else "none"),
        allowed_hosts=sorted(guard.allowed_hosts),
        forwarded_allow_ips=trusted_proxies,
    )
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        log_level="warning",
        # X-Forwarded-For sets the recorded client address only from a proxy named here
        proxy_headers=bool(trusted_proxies),
        forwarded_allow_ips=trusted_proxies or None,
    )
    uvicorn.Server(config).run(sockets=[sock])
