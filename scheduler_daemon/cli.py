"""The `scheduler-daemon` command line: parsing and printing only; Client and below do the work."""

import getpass
import json
import socket
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any, NoReturn

import click
import psycopg

from scheduler_daemon import view
from scheduler_daemon.domain.duration import parse_duration
from scheduler_daemon.domain.schedule import ScheduleError, load_zone
from scheduler_daemon.domain.task import (
    DST_GAP_POLICIES,
    DST_OVERLAP_POLICIES,
    MISFIRE_POLICIES,
    OVERLAP_POLICIES,
    InvalidTask,
    TaskSpec,
)
from scheduler_daemon.logconfig import LEVELS, configure
from scheduler_daemon.settings import (
    DATABASE_URL_ENV,
    DaemonSettings,
    InvalidSettings,
    resolve_database_url,
)
from scheduler_daemon.storage.database import first_line, redact
from scheduler_daemon.storage.error import (
    Conflict,
    DatabaseUnavailable,
    NotFound,
    SchemaMismatch,
)
from scheduler_daemon.version import __version__

EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 1


class Duration(click.ParamType):
    name = "duration"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        try:
            return parse_duration(value) if isinstance(value, str) else value
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = Duration()
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


def _who() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


def _emit(ctx: click.Context, data: Any, text: str) -> None:
    click.echo(json.dumps(data, indent=2, default=str) if ctx.obj["json"] else text)


def _client(ctx: click.Context) -> Any:
    from scheduler_daemon.client import Client

    return Client(resolve_database_url(ctx.obj["database_url"]))


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


# -- migrate -------------------------------------------------------------------------------------
@cli.command()
@click.option("--check", is_flag=True, help="Exit 1 when the schema is behind this build.")
@click.option("--sql", "as_sql", is_flag=True, help="Print the DDL instead of running it.")
@click.pass_context
def migrate(ctx: click.Context, check: bool, as_sql: bool) -> None:
    """Bring the schema to this build's revision."""
    from scheduler_daemon.storage import migration

    if as_sql:
        click.echo(migration.offline_sql())
        return
    url = resolve_database_url(ctx.obj["database_url"])
    if check:
        current, at, head = migration.is_current(url)
        click.echo(f"schema at {at or 'nothing'}, this build expects {head}")
        ctx.exit(0 if current else 1)
    migration.upgrade(url)
    click.echo(f"schema at {migration.head_revision()}")


# -- tasks ---------------------------------------------------------------------------------------
@cli.group()
def tasks() -> None:
    """Define, inspect and control tasks."""


def task_options(*, adding: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The definition options shared by `tasks add` and `tasks update` (update: unset = keep)."""
    d = TaskSpec.__dataclass_fields__

    def default(name: str) -> Any:
        return d[name].default if adding else None

    def optional(inner: click.ParamType) -> click.ParamType:
        return inner if adding else Clearable(inner)

    options = [
        click.option("--cron", help="Cron expression, in the task's time zone."),
        click.option(
            "--every", type=DURATION, help="Fixed rate, anchored at creation (30s, 5m, PT1H)."
        ),
        click.option("--at", "at_text", metavar="INSTANT", help="One-shot ISO 8601 instant."),
        click.option(
            "--timezone",
            default=default("timezone"),
            help="IANA zone." + ("  [default: UTC]" if adding else ""),
        ),
        click.option("--command", help="Shell command (shell executor)."),
        click.option("--http", help="URL to POST to (http executor)."),
        click.option(
            "--call", metavar="MODULE:FUNCTION", help="Python callable (python executor)."
        ),
        click.option(
            "--concurrency-key",
            type=optional(click.STRING),
            help="Runs sharing a key go one at a time, in order."
            + ("" if adding else "  `none` clears it."),
        ),
        click.option("--overlap", type=click.Choice(OVERLAP_POLICIES), default=default("overlap")),
        click.option("--misfire", type=click.Choice(MISFIRE_POLICIES), default=default("misfire")),
        click.option("--misfire-grace", type=DURATION, default=default("misfire_grace")),
        click.option("--catchup-limit", type=optional(click.INT)),
        click.option("--catchup-window", type=optional(DURATION)),
        click.option("--dst-gap", type=click.Choice(DST_GAP_POLICIES), default=default("dst_gap")),
        click.option(
            "--dst-overlap", type=click.Choice(DST_OVERLAP_POLICIES), default=default("dst_overlap")
        ),
        click.option("--start-deadline", type=optional(DURATION)),
        click.option("--timeout", type=optional(DURATION)),
        click.option("--max-attempts", type=int, default=default("max_attempts")),
        click.option("--backoff", type=DURATION, default=default("backoff")),
    ]
    if adding:
        options.append(click.option("--paused", is_flag=True, help="Create it paused."))

    def apply(f: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            f = option(f)
        return f

    return apply


def _definition(opts: dict[str, Any], *, adding: bool, zone: str = "UTC") -> dict[str, Any]:
    """TaskSpec fields from the parsed options (update: only those given). A naive `--at` is
    read in `--timezone`, else in `zone` (the task's own zone when updating)."""
    targets = {k: opts.pop(k) for k in ("command", "http", "call")}
    given = {k: v for k, v in targets.items() if v is not None}
    if len(given) > 1 or (adding and not given):
        raise InvalidTask("give exactly one of --command, --http or --call")
    at_text = opts.pop("at_text")
    if at_text is not None:
        opts["at"] = _instant(at_text, opts.get("timezone") or zone)
    schedules = [k for k in ("cron", "every", "at") if opts.get(k) is not None]
    if len(schedules) > 1 or (adding and not schedules):
        raise InvalidTask("give exactly one schedule: --cron, --every or --at")
    if given:
        key, target = next(iter(given.items()))
        opts["executor"] = {"command": "shell", "http": "http", "call": "python"}[key]
        opts["target"] = target
    if adding:
        return opts
    return {k: None if v is CLEAR else v for k, v in opts.items() if v is not None}


def _instant(text: str, zone: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidTask(
            f"--at '{text}' is not an ISO 8601 instant such as 2030-01-01T09:00"
        ) from exc
    try:
        return value if value.tzinfo else value.replace(tzinfo=load_zone(zone))
    except ScheduleError as exc:
        raise InvalidTask(str(exc)) from exc


def _show_task(ctx: click.Context, task: Any) -> None:
    fields = view.task_fields(task)
    _emit(ctx, fields, view.pairs(fields))


@tasks.command("add")
@click.argument("name")
@task_options(adding=True)
@json_option
@click.pass_context
def tasks_add(ctx: click.Context, name: str, **opts: Any) -> None:
    """Add a task."""
    spec = TaskSpec(name=name, **_definition(opts, adding=True))
    _show_task(ctx, _client(ctx).add_task(spec))


@tasks.command("update")
@click.argument("task")
@task_options(adding=False)
@json_option
@click.pass_context
def tasks_update(ctx: click.Context, task: str, **opts: Any) -> None:
    """Change a task's definition; it takes effect from the next firing."""
    client = _client(ctx)
    zone = client.get_task(task).spec.timezone if opts.get("at_text") else "UTC"
    changes = _definition(opts, adding=False, zone=zone)
    if not changes:
        raise InvalidTask("nothing to update: give at least one option")
    _show_task(ctx, client.update_task(task, **changes))


@tasks.command("list")
@json_option
@click.pass_context
def tasks_list(ctx: click.Context) -> None:
    """List the tasks."""
    rows = [view.task_fields(t) for t in _client(ctx).list_tasks()]
    _emit(ctx, rows, view.table(rows, view.TASK_COLUMNS))


@tasks.command("show")
@click.argument("task")
@json_option
@click.pass_context
def tasks_show(ctx: click.Context, task: str) -> None:
    """Show one task."""
    _show_task(ctx, _client(ctx).get_task(task))


@tasks.command("pause")
@click.argument("task")
@json_option
@click.pass_context
def tasks_pause(ctx: click.Context, task: str) -> None:
    """Stop firing a task (nothing is owed for firings while paused)."""
    _show_task(ctx, _client(ctx).pause(task))


@tasks.command("resume")
@click.argument("task")
@json_option
@click.pass_context
def tasks_resume(ctx: click.Context, task: str) -> None:
    """Fire a paused task again, from its next firing after now."""
    _show_task(ctx, _client(ctx).resume(task))


@tasks.command("next")
@click.argument("task")
@click.option("-n", "count", type=int, default=5, show_default=True)
@json_option
@click.pass_context
def tasks_next(ctx: click.Context, task: str, count: int) -> None:
    """The next fire times, in the task's zone and in UTC."""
    client = _client(ctx)
    record = client.get_task(task)
    rows = [
        view.fire_time_fields(t, record.spec.timezone)
        for t in client.next_fire_times(record.id, count)
    ]
    _emit(ctx, rows, view.table(rows, ("local", "utc")))


@tasks.command("trigger")
@click.argument("task")
@json_option
@click.pass_context
def tasks_trigger(ctx: click.Context, task: str) -> None:
    """Queue a manual occurrence now; it follows the task's overlap policy."""
    occ = _client(ctx).trigger(task, requested_by=_who())
    fields = view.occurrence_fields(occ)
    text = (
        f"occurrence {occ['id']} queued"
        if occ["status"] == "queued"
        else f"occurrence {occ['id']} skipped: {occ['reason']} (an occurrence is active)"
    )
    _emit(ctx, fields, text)


@tasks.command("delete")
@click.argument("task")
@click.option("--force", is_flag=True, help="Cancel active occurrences instead of refusing.")
@json_option
@click.pass_context
def tasks_delete(ctx: click.Context, task: str, force: bool) -> None:
    """Delete a task; its history stays queryable by id and its name becomes free."""
    cancelled = _client(ctx).delete(task, force=force, requested_by=_who())
    _emit(
        ctx,
        {"deleted": task, "cancelled_occurrence_ids": cancelled},
        f"deleted {task}" + (f"; cancelled occurrences {cancelled}" if cancelled else ""),
    )


# -- runs ----------------------------------------------------------------------------------------
@cli.group()
def runs() -> None:
    """Run history."""


@runs.command("list")
@click.option("--task", default=None, help="Task name or id (ids of deleted tasks too).")
@click.option("--status", default=None)
@click.option("--limit", type=int, default=50, show_default=True)
@json_option
@click.pass_context
def runs_list(ctx: click.Context, task: str | None, status: str | None, limit: int) -> None:
    """Newest first: one row per run attempt plus one per occurrence that never ran."""
    rows = [
        view.run_fields(r) for r in _client(ctx).list_runs(task=task, status=status, limit=limit)
    ]
    _emit(ctx, rows, view.table(rows, view.RUN_COLUMNS))


@runs.command("show")
@click.argument("ident", type=int, metavar="ID")
@click.option("--occurrence", is_flag=True, help="ID is an occurrence id, not a run id.")
@json_option
@click.pass_context
def runs_show(ctx: click.Context, ident: int, occurrence: bool) -> None:
    """One run, or with --occurrence one occurrence and all its runs."""
    client = _client(ctx)
    if occurrence:
        fields = view.occurrence_fields(client.show_occurrence(ident))
        runs_text = view.table(fields["runs"], view.RUN_COLUMNS) if fields["runs"] else "(no runs)"
        plain = {k: v for k, v in fields.items() if k != "runs"}
        _emit(ctx, fields, view.pairs(plain) + "\n\n" + runs_text)
    else:
        fields = view.run_detail_fields(client.show_run(ident))
        _emit(ctx, fields, view.pairs(fields))


@runs.command("cancel")
@click.argument("ident", type=int, metavar="ID")
@click.option("--occurrence", is_flag=True, help="ID is an occurrence id, not a run id.")
@json_option
@click.pass_context
def runs_cancel(ctx: click.Context, ident: int, occurrence: bool) -> None:
    """Cancel a run (its occurrence): the holder is fenced and stops the job at its next renewal."""
    row = _client(ctx).cancel(ident, occurrence=occurrence, requested_by=_who())
    fields = view.occurrence_fields(row)
    _emit(ctx, fields, f"occurrence {row['id']} cancelled")


def fleet_timing_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Options `run` and `recover` share: they set the takeover point, the quiet period after a
    database restart, the interruption bound and when a silent instance is removed."""
    options = [
        click.option(
            "--lease-ttl",
            envvar="SCHEDULER_LEASE_TTL",
            type=DURATION,
            default="15s",
            show_default=True,
            help="Run lease length; renewed every TTL/3.",
        ),
        click.option(
            "--lease-grace",
            envvar="SCHEDULER_LEASE_GRACE",
            type=DURATION,
            default="5s",
            show_default=True,
            help="Wait past lease expiry before a takeover.",
        ),
        click.option(
            "--max-interruptions",
            envvar="SCHEDULER_MAX_INTERRUPTIONS",
            type=int,
            default=DaemonSettings.max_interruptions,
            show_default=True,
            help="Interruptions (shutdown, takeover) before an occurrence gives up.",
        ),
        click.option(
            "--instance-expiry",
            envvar="SCHEDULER_INSTANCE_EXPIRY",
            type=DURATION,
            default="10m",
            show_default=True,
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
@click.option(
    "--concurrency",
    envvar="SCHEDULER_CONCURRENCY",
    type=int,
    default=DaemonSettings.concurrency,
    show_default=True,
    help="Local job slots.",
)
@click.option(
    "--poll-interval",
    envvar="SCHEDULER_POLL_INTERVAL",
    type=DURATION,
    default="1s",
    show_default=True,
)
@click.option(
    "--drain-timeout",
    envvar="SCHEDULER_DRAIN_TIMEOUT",
    type=DURATION,
    default="20s",
    show_default=True,
    help="How long running jobs may finish after SIGTERM.",
)
@click.option(
    "--stop-timeout",
    envvar="SCHEDULER_STOP_TIMEOUT",
    type=DURATION,
    default="30s",
    show_default=True,
    help="What the supervisor allows between SIGTERM and SIGKILL.",
)
@click.option(
    "--reconcile-interval",
    envvar="SCHEDULER_RECONCILE_INTERVAL",
    type=DURATION,
    default="5s",
    show_default=True,
)
@click.option(
    "--listen/--no-listen",
    envvar="SCHEDULER_LISTEN",
    default=True,
    show_default=True,
    help="LISTEN for wake-ups (turn off behind PgBouncer in transaction mode).",
)
@fleet_timing_options
@click.pass_context
def run(ctx: click.Context, **options: Any) -> None:
    """Run the daemon until SIGTERM/SIGINT (a second signal stops at once)."""
    import signal
    import threading

    from scheduler_daemon.daemon import Daemon

    try:
        settings = DaemonSettings(**options).validate()
    except InvalidSettings as exc:
        raise InvalidTask(str(exc)) from exc
    url = resolve_database_url(ctx.obj["database_url"])
    stop, hard_stop = threading.Event(), threading.Event()

    daemon = Daemon(url, settings)

    def on_signal(signum: int, _frame: Any) -> None:
        (hard_stop if stop.is_set() else stop).set()
        daemon.wake.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    ctx.exit(daemon.run(stop, hard_stop))


@cli.command("status")
@json_option
@click.pass_context
def status(ctx: click.Context) -> None:
    """Registered instances, queue depth, executing runs against the budget, takeover bounds."""
    fields = view.status_fields(_client(ctx).status())
    text = (
        view.table(fields["instances"], view.INSTANCE_COLUMNS)
        + f"\n\nqueue depth {fields['queue_depth']}, executing "
        f"{fields['executing_runs']}/{fields['max_concurrent_runs']}"
    )
    _emit(ctx, fields, text)


@cli.command("recover")
@click.option("--dry-run", is_flag=True, help="Show what it would change; change nothing.")
@fleet_timing_options
@json_option
@click.pass_context
def recover(ctx: click.Context, dry_run: bool, **options: Any) -> None:
    """One reconciliation pass: take over runs past their takeover point, give back expired
    claims, expire occurrences past their start deadline, finalize one-shot tasks, remove dead
    instances. Safe while daemons run; a second pass changes nothing."""
    from scheduler_daemon.daemon import recover as recover_pass

    try:
        settings = DaemonSettings(**options).validate()
    except InvalidSettings as exc:
        raise InvalidTask(str(exc)) from exc
    report = recover_pass(resolve_database_url(ctx.obj["database_url"]), settings, dry_run=dry_run)
    data = {"dry_run": dry_run, "counts": report.counts, "ids": report.ids}
    verb = "would change" if dry_run else "changed"
    lines = [
        f"{name.replace('_', ' ')}: {len(ids)}" + (f" {ids}" if ids else "")
        for name, ids in report.ids.items()
    ]
    _emit(ctx, data, f"recover {verb} {report.changed} item(s)\n" + "\n".join(lines))


# -- config --------------------------------------------------------------------------------------
@cli.group()
def config() -> None:
    """Fleet-wide settings that every replica reads from the database."""


@config.command("show")
@json_option
@click.pass_context
def config_show(ctx: click.Context) -> None:
    settings = {k.replace("_", "-"): v for k, v in _client(ctx).fleet_settings().items()}
    _emit(ctx, settings, view.pairs(settings) if settings else "(none)")


@config.command("set")
@click.argument("name")
@click.argument("value")
@json_option
@click.pass_context
def config_set(ctx: click.Context, name: str, value: str) -> None:
    row = _client(ctx).set_fleet_setting(name, value, updated_by=_who())
    _emit(ctx, {name: row["value"]}, f"{name} = {row['value']}")


# -- embedded database ---------------------------------------------------------------------------
@cli.group()
def db() -> None:
    """The embedded PostgreSQL used when no database URL is configured."""


@db.command("stop")
def db_stop() -> None:
    """Stop the embedded server now, whoever uses it."""
    from scheduler_daemon import embedded

    click.echo("stopped" if embedded.stop() else "not running")


def _fail(code: int, message: str) -> NoReturn:
    click.echo(f"error: {redact(message)}", err=True)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Entry point: every expected failure is one line on stderr and a documented exit code."""
    from scheduler_daemon.embedded import EmbeddedUnavailable

    try:
        code = cli.main(args=argv, prog_name="scheduler-daemon", standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        _fail(130, "aborted")
    except click.UsageError as exc:
        _fail(EXIT_BAD_INPUT, exc.format_message().replace("\n", " "))
    except (InvalidTask, ScheduleError, Conflict, NotFound) as exc:
        _fail(EXIT_BAD_INPUT, str(exc))
    except (DatabaseUnavailable, EmbeddedUnavailable, SchemaMismatch) as exc:
        _fail(EXIT_UNAVAILABLE, str(exc))
    except psycopg.errors.UndefinedTable:
        _fail(
            EXIT_UNAVAILABLE,
            "the database has no scheduler-daemon schema: run `scheduler-daemon migrate`",
        )
    except psycopg.Error as exc:  # permissions, lock timeouts, the unforeseen: one line, no trace
        _fail(EXIT_UNAVAILABLE, f"database error: {first_line(exc)}")
