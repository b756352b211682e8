"""Commands on the fleet and its database: migrate, run, status, recover, config, db."""

import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import click

from scheduler_daemon import presentation
from scheduler_daemon.cli import output
from scheduler_daemon.cli.base import (
    DURATION,
    DURATION_OR_ZERO,
    EXIT_CONTRACT_BLOCKED,
    EXIT_SCHEMA_BEHIND,
    EXIT_SCHEMA_SHAPE,
    EXIT_SCHEMA_TOO_NEW,
    cli,
    client_for,
    emit,
    json_option,
    who,
)
from scheduler_daemon.domain import limit
from scheduler_daemon.domain.duration import format_duration, parse_duration
from scheduler_daemon.runtime.supervision import (
    EXIT_FAILED_PASSES,
    EXIT_IN_PROCESS_STUCK,
    EXIT_LEASE_KEEPER_FAILED,
)
from scheduler_daemon.settings import (
    DATABASE_URL_ENV,
    DaemonSettings,
    InvalidSettings,
    resolve_database_url,
)


# -- migrate -------------------------------------------------------------------------------------
@cli.command()
@click.option(
    "--check",
    is_flag=True,
    help=f"Change nothing; exit 0 when this build works with the schema as it is, "
    f"{EXIT_SCHEMA_BEHIND} when it needs `migrate`, {EXIT_SCHEMA_TOO_NEW} when the schema is "
    f"too new for it, {EXIT_SCHEMA_SHAPE} when it is not the shape this build knows there.",
)
@click.option(
    "--contract",
    is_flag=True,
    help="Also apply the destructive (contract) steps; refused with exit "
    f"{EXIT_CONTRACT_BLOCKED} while an instance of an older build is registered.",
)
@click.option("--sql", "as_sql", is_flag=True, help="Print each step's SQL and phase; run nothing.")
@click.option(
    "--downgrade-to",
    metavar="REVISION",
    help="Undo the steps after REVISION (a rollback; docs/upgrading.md says what it keeps).",
)
@json_option
@click.pass_context
def migrate(
    ctx: click.Context, check: bool, contract: bool, as_sql: bool, downgrade_to: str | None
) -> None:
    """Apply the schema's expand steps (safe while older replicas run); with --contract, the
    contract steps too, once every replica runs this build (docs/upgrading.md)."""
    from scheduler_daemon.domain.schema_compat import before_squash
    from scheduler_daemon.storage import migration, presquash

    if sum([check, contract, as_sql, downgrade_to is not None]) > 1:
        raise click.UsageError("--check, --contract, --sql and --downgrade-to exclude each other")
    if downgrade_to is not None and before_squash(downgrade_to):
        raise click.UsageError(f"--downgrade-to {downgrade_to}: {presquash.REFUSED_DOWNGRADE}")
    if downgrade_to is not None and not migration.build().knows(downgrade_to):
        raise click.UsageError(f"--downgrade-to: this build has no revision '{downgrade_to}'")
    if as_sql:
        click.echo(migration.offline_sql())
        return
    url = resolve_database_url(ctx.obj["database_url"])
    if check:
        found = migration.state(url)
        fields = found.fields()
        emit(ctx, fields, _schema_line(fields) + f"\n{found.verdict.message}")
        migration.raise_unless_compatible(found.verdict)
        return
    if downgrade_to is not None:
        migration.downgrade(url, downgrade_to)
        emit(ctx, migration.state(url).fields(), f"schema at {migration.current_revision(url)}")
        return
    report = migration.contract(url) if contract else migration.expand(url)
    fields = migration.state(url).fields()
    data: dict[str, Any] = {
        "before": report.before,
        "after": report.after,
        "applied": list(report.applied),
    }
    data["functions"] = list(report.functions)
    if report.newer_than_this_build:
        text = f"schema at {report.after}, newer than this build and works with it: nothing to do"
    elif report.applied:
        text = f"schema at {report.after} (applied {', '.join(report.applied)})"
    else:
        text = f"schema at {report.after}: nothing to apply"
    if report.functions:
        text += f"; functions re-created from sql/functions: {', '.join(report.functions)}"
    if report.contract_pending:
        text += (
            f"; contract step(s) {', '.join(report.contract_pending)} pending: run "
            "`migrate --contract` once every replica runs this build"
        )
    if not report.newer_than_this_build:
        data["partitions"], line = _upkeep_after_migrate(url)
        text += line
    emit(ctx, {**data, "schema": fields}, text)


def _upkeep_after_migrate(url: str) -> tuple[dict[str, Any], str]:
    """`migrate`'s last step: one partition upkeep, so a fresh database has its partitions
    ahead (ADR 0033). Its giving up fails nothing: the daemons' upkeep tries again."""
    from scheduler_daemon.operations import partition_upkeep
    from scheduler_daemon.services.partition_keeper import UpkeepFailed

    try:
        done = partition_upkeep(url)
    except UpkeepFailed as exc:
        return {"error": str(exc)}, f"; partition upkeep gave up (the daemons retry): {exc}"
    if not (done.get("created") or done.get("dropped")):  # unpartitioned, busy, or nothing to do
        return done, ""
    return done, (
        f"; partitions: {len(done.get('created') or [])} created, "
        f"{len(done.get('dropped') or [])} dropped, {done.get('partitions_ahead')} ahead"
    )


def _schema_line(schema: dict[str, Any]) -> str:
    """The schema's compatible range in one line (`status`, `migrate --check`)."""
    line = (
        f"schema at {schema['revision'] or 'nothing'}: works with builds from schema "
        f"{schema['oldest_build'] or '?'} on whose needs it meets"
    )
    if schema["contract_pending"]:
        line += f"; contract pending: {', '.join(schema['contract_pending'])}"
    verdict = "works" if schema["this_build_compatible"] else "does not work"
    return line + (
        f"; this build (schema {schema['this_build']}, needs {schema['this_build_needs']}) "
        f"{verdict}"
    )


FC = TypeVar("FC", bound=Callable[..., Any])


def setting_option(flag: str, **kwargs: Any) -> Callable[[FC], FC]:
    """The option `flag` (`--poll-interval`, `--listen/--no-listen`) that sets the DaemonSettings
    field of the same name (`poll_interval`), read from the environment variable of that name
    too (`SCHEDULER_POLL_INTERVAL`), with the field's default (`setting`)."""
    name = flag.removeprefix("--").partition("/")[0].replace("-", "_")
    return click.option(flag, envvar=f"SCHEDULER_{name.upper()}", **setting(name), **kwargs)


def setting(name: str) -> dict[str, Any]:
    """The default of the option that sets DaemonSettings field `name`, read from the field and
    never retyped here; a duration goes in as operators type it (`15s`), which DURATION parses
    back to the same value, so `--help` and the docs show `15s`."""
    value = getattr(DaemonSettings, name)
    return {
        "default": format_duration(value) if isinstance(value, timedelta) else value,
        "show_default": True,
    }


def fleet_timing_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Options `run` and `recover` share: they set the takeover point, the quiet period after a
    database restart, the interruption bound and when a silent instance is removed."""
    options = [
        setting_option("--lease-ttl", type=DURATION, help="Run lease length; renewed every TTL/3."),
        setting_option(
            "--lease-grace", type=DURATION, help="Wait past lease expiry before a takeover."
        ),
        setting_option(
            "--max-interruptions",
            type=int,
            help="Interruptions (shutdown, takeover) before an occurrence gives up.",
        ),
        setting_option(
            "--instance-expiry",
            type=DURATION,
            help="Silence after which a dead instance's row is removed.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


# -- daemon --------------------------------------------------------------------------------------
@cli.command("run")
@click.option(
    "--instance-id",
    "instance_prefix",
    envvar="SCHEDULER_INSTANCE_ID",
    default=DaemonSettings.instance_prefix,
    show_default="host name",
    help="Instance id prefix; a per-start suffix is always added.",
)
@setting_option("--concurrency", type=int, help="Local job slots.")
@setting_option("--poll-interval", type=DURATION)
@setting_option(
    "--batch-window",
    type=DURATION_OR_ZERO,
    help="After a job ends, wait this long for the other running jobs to end too, so their "
    "outcomes and refills share a transaction; 0: write each end at once.",
)
@setting_option(
    "--drain-timeout",
    type=DURATION_OR_ZERO,
    help="How long running jobs may finish after SIGTERM; 0: stop them at once.",
)
@setting_option(
    "--stop-timeout", type=DURATION, help="What the supervisor allows between SIGTERM and SIGKILL."
)
@setting_option("--reconcile-interval", type=DURATION)
@setting_option(
    "--listen/--no-listen",
    help="LISTEN for wake-ups (turn off behind PgBouncer in transaction mode).",
)
@setting_option(
    "--http-port",
    type=int,
    help="Serve /healthz, /readyz and /metrics on this port; 0: no endpoint.",
)
@setting_option(
    "--http-host", help="Address the endpoint listens on (0.0.0.0 for a Kubernetes probe)."
)
@setting_option(
    "--metrics-task-limit",
    type=int,
    help="Per-task gauges on /metrics name the first this many live tasks by id; the rest "
    'share task="_other"; 0: no per-task gauges.',
)
@setting_option(
    "--max-failed-passes",
    type=int,
    help=f"Exit {EXIT_FAILED_PASSES} after this many failed passes of a loop step in a row, "
    f"{EXIT_LEASE_KEEPER_FAILED} after as many of the lease keeper (database outages and lock "
    "waits do not count), so the supervisor restarts the daemon.",
)
@setting_option(
    "--in-process-stop-grace",
    type=DURATION,
    help="How long an in-process job asked to stop (timeout, cancel) may take to return; past "
    f"it the daemon stops claiming, drains and exits {EXIT_IN_PROCESS_STUCK}.",
)
@setting_option(
    "--otel/--no-otel",
    help="A span per run over OTLP/HTTP, set up by the standard OTEL_* variables (the "
    "endpoint: OTEL_EXPORTER_OTLP_ENDPOINT); jobs get TRACEPARENT. Needs the `otel` extra.",
)
@click.option(
    "--embedded",
    envvar="SCHEDULER_EMBEDDED",
    is_flag=True,
    help="With no database URL, use the embedded server even off a terminal (under systemd or "
    "Kubernetes); without it, no URL there is an error.",
)
@fleet_timing_options
@click.pass_context
def run(ctx: click.Context, embedded: bool, **options: Any) -> None:
    """Run the daemon until SIGTERM/SIGINT (a second signal stops at once)."""
    import threading

    from scheduler_daemon.runtime.daemon import Daemon
    from scheduler_daemon.runtime.notify import Notifier
    from scheduler_daemon.runtime.signals import SignalRelay

    notifier = Notifier.from_environment()  # before any job could inherit NOTIFY_SOCKET
    settings = DaemonSettings(**options, watchdog=notifier.watchdog).validate()
    if settings.otel:
        from scheduler_daemon.runtime import tracing

        if not tracing.available():  # one line, exit 2, before anything is written
            raise InvalidSettings(tracing.EXTRA_MISSING)
    url = ctx.obj["database_url"]
    if not url and not embedded and not sys.stdin.isatty():
        # A typo in an EnvironmentFile must not start a private server no peer can reach.
        raise InvalidSettings(
            f"no database URL: set --database-url or {DATABASE_URL_ENV} (a fleet shares one "
            "server), or pass --embedded (SCHEDULER_EMBEDDED=1) for the embedded server"
        )
    url = resolve_database_url(url)
    stop, hard_stop = threading.Event(), threading.Event()

    daemon = Daemon(url, settings, notifier=notifier)

    def on_signal(_signum: int) -> None:  # on the relay's thread: it may wait for any lock
        (hard_stop if stop.is_set() else stop).set()
        daemon.wake.set()

    SignalRelay(on_signal)
    code = daemon.run(stop, hard_stop)
    if daemon.lingering:  # an in-process job's thread (or one it started) must not hold the exit
        import atexit

        from scheduler_daemon.runtime.daemon import exit_now

        atexit._run_exitfuncs()  # the embedded server's release, as a normal exit runs it
        exit_now(code)
    ctx.exit(code)


@cli.command("status")
@json_option
@click.pass_context
def status(ctx: click.Context) -> None:
    """Registered instances, queue depth, executing runs against the budget, takeover bounds."""
    fields = presentation.status_fields(client_for(ctx).status())
    text = (
        output.table(
            presentation.instances_table_rows(fields["instances"]), output.INSTANCE_COLUMNS
        )
        + f"\n\nqueue depth {fields['queue_depth']}, executing "
        f"{fields['executing_runs']}/{fields['max_concurrent_runs']}"
        + "".join(f"\nwarning: {warning}" for warning in fields["warnings"])
        + f"\n{_schema_line(fields['schema'])}"
    )
    if fields["running_by_build"]:
        text += "\nrunning by build: " + ", ".join(
            f"{build} {count}" for build, count in fields["running_by_build"].items()
        )
    for parked in fields["parked_tasks"]:
        text += f"\nparked: {parked['name']} (id {parked['id']}): {parked['park_error']}"
    for pending in fields["pending_resumes"]:
        text += f"\npaused until {pending['paused_until']}: {pending['name']} (id {pending['id']})"
    for holder in fields["budget_lock_holders"]:
        text += "\n" + presentation.lock_holder_text(holder)
    notifications = presentation.notifications_text(fields["notifications"])
    if notifications is not None:
        text += "\n" + notifications
    text += "\n" + presentation.database_text(fields["database"])
    if (line := _partitions_line(fields["partitions"])) is not None:
        text += "\n" + line
    emit(ctx, fields, text)


def _partitions_line(found: dict[str, Any]) -> str | None:
    """`status`'s line for the history's partition upkeep (ADR 0033); None when history is
    not partitioned and no upkeep ever failed."""
    ahead, error = found.get("partitions_ahead"), found.get("last_error")
    if ahead is None and error is None:
        return None
    line = f"history partitions ahead: {'none' if ahead is None else ahead}"
    line += f"; last upkeep {found.get('last_success_at') or 'never'}"
    success, failed = found.get("last_success_at"), found.get("last_error_at")
    if error is not None and (success is None or (failed or "") >= success):  # ISO, both UTC
        line += f"; last error at {failed}: {error}"
    return line


@cli.command("recover")
@click.option("--dry-run", is_flag=True, help="Show what it would change; change nothing.")
@click.option(
    "--wait",
    "wait_text",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[=LIMIT]",
    help="Then wait, at most LIMIT, for the takeover points of the runs whose owner stopped "
    "renewing, and take them over. Default LIMIT: the largest takeover bound of the registered "
    "instances plus the reconcile interval.",
)
@fleet_timing_options
@json_option
@click.pass_context
def recover(ctx: click.Context, dry_run: bool, wait_text: str | None, **options: Any) -> None:
    """One reconciliation pass: take over runs past their takeover point, give back expired
    claims, expire occurrences past their start deadline, finalize one-shot tasks, remove dead
    instances. Safe while daemons run; a second pass changes nothing. Then it reports the runs
    still inside their lease (with --wait: waits for those whose owner stopped renewing)."""
    from scheduler_daemon.operations import default_wait
    from scheduler_daemon.operations import recover as recover_pass

    if dry_run and wait_text is not None:
        raise click.UsageError("--dry-run and --wait exclude each other")
    try:
        wait = limit.duration("duration", parse_duration(wait_text)) if wait_text else None
    except ValueError as exc:  # OutOfBounds too
        raise click.BadParameter(str(exc), param_hint="'--wait'") from exc
    settings = DaemonSettings(**options).validate()  # InvalidSettings: one line, exit 2
    url = resolve_database_url(ctx.obj["database_url"])
    if wait_text == "":
        wait = default_wait(url, settings)

    def on_wait(runs: list[dict[str, Any]], until: datetime) -> None:
        listed = ", ".join(f"run {r['id']} (owner {r['owner']})" for r in runs)
        click.echo(
            f"waiting until {presentation.iso(until)} (database clock) for the takeover of "
            f"{listed}: its owner stopped renewing",
            err=True,
        )

    report, inside = recover_pass(url, settings, dry_run=dry_run, wait=wait, on_wait=on_wait)
    running = [presentation.inside_lease_fields(r) for r in inside]
    data = {
        "dry_run": dry_run,
        "counts": report.counts,
        "ids": report.ids,
        "wait_seconds": None if wait is None else wait.total_seconds(),
        "inside_lease": running,
    }
    verb = "would change" if dry_run else "changed"
    lines = [
        f"{name.replace('_', ' ')}: {len(ids)}" + (f" {ids}" if ids else "")
        for name, ids in report.ids.items()
    ]
    lines += [_inside_line(r, waited=wait is not None) for r in running]
    emit(ctx, data, f"recover {verb} {report.changed} item(s)\n" + "\n".join(lines))


def _inside_line(run: dict[str, Any], *, waited: bool) -> str:
    head = (
        f"inside its lease: run {run['run_id']} (occurrence {run['occurrence_id']}, task "
        f"{run['task_id']}), owner {run['owner']}"
    )
    if run["owner_renewing"]:
        return f"{head} still renews it: left alone"
    then = "past the --wait limit" if waited else "`recover --wait` takes it over then"
    return f"{head} stopped renewing: takeover from {run['takeover_at']}; {then}"


# -- config --------------------------------------------------------------------------------------
@cli.group()
def config() -> None:
    """Fleet-wide settings that every replica reads from the database."""


@config.command("show")
@json_option
@click.pass_context
def config_show(ctx: click.Context) -> None:
    settings = presentation.fleet_settings_fields(client_for(ctx).fleet_settings())
    emit(ctx, settings, output.pairs(settings) if settings else "(none)")


@config.command("set")
@click.argument("name")
@click.argument("values", nargs=-1, required=True, metavar="VALUE...")
@json_option
@click.pass_context
def config_set(ctx: click.Context, name: str, values: tuple[str, ...]) -> None:
    """Set one fleet setting. `notify-headers` takes one 'NAME: VALUE' per header; every other
    setting one VALUE."""
    row = client_for(ctx).set_fleet_setting(name, values, updated_by=who())
    (value,) = presentation.fleet_settings_fields({row["key"]: row["value"]}).values()
    emit(ctx, {name: value}, f"{name} = {value}")


# -- database ------------------------------------------------------------------------------------
@cli.group()
def db() -> None:
    """The database itself: its roles and grants, and the embedded PostgreSQL used when no
    database URL is configured."""


@db.command("stop")
def db_stop() -> None:
    """Stop the embedded server now, whoever uses it."""
    from scheduler_daemon import embedded

    click.echo("stopped" if embedded.stop() else "not running")
