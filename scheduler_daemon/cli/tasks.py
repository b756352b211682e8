"""`scheduler-daemon tasks …`: define, inspect and control tasks (parsing and printing only)."""

import dataclasses
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Any

import click

from scheduler_daemon import presentation
from scheduler_daemon.cli import output
from scheduler_daemon.cli.base import (
    CLEAR,
    DURATION,
    DURATION_OR_ZERO,
    Clearable,
    cli,
    client_for,
    emit,
    hint_more,
    json_option,
    operator,
    paging_options,
    who,
)
from scheduler_daemon.domain import argument
from scheduler_daemon.domain.status import (
    DstGapPolicy,
    DstOverlapPolicy,
    ExecutorKind,
    MisfirePolicy,
    OccurrenceStatus,
    OverlapPolicy,
    TaskStatus,
)
from scheduler_daemon.domain.task import InvalidTask, TaskSpec, header_pairs


# -- tasks ---------------------------------------------------------------------------------------
@cli.group()
def tasks() -> None:
    """Define, inspect and control tasks."""


Option = Callable[[Callable[..., Any]], Callable[..., Any]]  # a click decorator


def task_options(*, adding: bool) -> Option:
    """The definition options shared by `tasks add` and `tasks update` (update: unset = keep)."""
    options = [
        *_schedule_options(adding),
        *_executor_options(adding),
        *_policy_options(adding),
        *_retry_options(adding),
        *_notify_options(adding),
    ]
    if adding:
        options.append(click.option("--paused", is_flag=True, help="Create it paused."))

    def apply(f: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            f = option(f)
        return f

    return apply


def _default(name: str, adding: bool) -> Any:
    """TaskSpec's default for `tasks add`, none for `tasks update` (unset = keep)."""
    value = TaskSpec.__dataclass_fields__[name].default
    # click matches an Enum default by its name, so a policy default goes in as its value.
    return (value.value if isinstance(value, StrEnum) else value) if adding else None


def _optional(inner: click.ParamType, adding: bool) -> click.ParamType:
    """A value `tasks update` may clear with `none`."""
    return inner if adding else Clearable(inner)


def _schedule_options(adding: bool) -> list[Option]:
    """When it fires: cron, fixed rate or one-shot, in a zone."""
    return [
        click.option("--cron", help="Cron expression, in the task's time zone."),
        click.option(
            "--every", type=DURATION, help="Fixed rate, anchored at creation (30s, 5m, PT1H)."
        ),
        click.option("--at", "at_text", metavar="INSTANT", help="One-shot ISO 8601 instant."),
        click.option(
            "--timezone",
            default=_default("timezone", adding),
            help="IANA zone." + ("  [default: UTC]" if adding else ""),
        ),
        click.option(
            "--spread",
            type=_optional(DURATION, adding),
            help="Start each firing up to this long after its nominal time, at an offset "
            "fixed per task and firing (at most half the shortest gap between firings)."
            + ("" if adding else "  `none` clears it."),
        ),
    ]


def _executor_options(adding: bool) -> list[Option]:
    """What it runs: a shell command, an HTTP call (with its headers) or a python callable."""
    return [
        click.option("--command", help="Shell command (shell executor)."),
        click.option("--http", help="URL to POST to (http executor)."),
        click.option(
            "--header",
            "headers",
            multiple=True,
            metavar="'NAME: VALUE'",
            help="HTTP header to send (repeat for more); shown as *** when it is a secret."
            + ("" if adding else "  Replaces all headers; `none` clears them."),
        ),
        click.option(
            "--call", metavar="MODULE:FUNCTION", help="Python callable (python executor)."
        ),
        click.option(
            "--in-process/--no-in-process" if not adding else "--in-process",
            "in_process",
            is_flag=True,
            default=False if adding else None,
            help="Run the --call function in the daemon (threads, or its event loop for an "
            "async def) instead of a worker process."
            + ("" if adding else "  --no-in-process: back to a worker process."),
        ),
    ]


def _policy_options(adding: bool) -> list[Option]:
    """How its runs behave: exclusion, misfires, DST, deadlines, retries and retention."""

    def default(name: str) -> Any:
        return _default(name, adding)

    def optional(inner: click.ParamType) -> click.ParamType:
        return _optional(inner, adding)

    return [
        click.option(
            "--concurrency-key",
            type=optional(click.STRING),
            help="Runs sharing a key go one at a time, in order."
            + ("" if adding else "  `none` clears it."),
        ),
        click.option("--overlap", type=_choice(OverlapPolicy), default=default("overlap")),
        click.option("--misfire", type=_choice(MisfirePolicy), default=default("misfire")),
        click.option("--misfire-grace", type=DURATION_OR_ZERO, default=default("misfire_grace")),
        click.option("--catchup-limit", type=optional(click.INT)),
        click.option("--catchup-window", type=optional(DURATION)),
        click.option("--dst-gap", type=_choice(DstGapPolicy), default=default("dst_gap")),
        click.option(
            "--dst-overlap", type=_choice(DstOverlapPolicy), default=default("dst_overlap")
        ),
        click.option("--start-deadline", type=optional(DURATION)),
        click.option("--timeout", type=optional(DURATION)),
        click.option(
            "--exclude-calendar",
            "exclude_calendars",
            multiple=True,
            metavar="CALENDAR",
            help="Skip (record `excluded`) the firings on this calendar's dates in the task's "
            "zone; repeat for more." + ("" if adding else "  Replaces them; `none` clears them."),
        ),
        click.option(
            "--history-retention",
            type=optional(DURATION),
            help="Keep this task's finished history this long (default: the fleet's "
            "history-retention)." + ("" if adding else "  `none` clears it."),
        ),
    ]


def _notify_options(adding: bool) -> list[Option]:
    """Who hears of its firings: the notify URL, its headers, the events and the deadline."""

    def optional(inner: click.ParamType) -> click.ParamType:
        return _optional(inner, adding)

    return [
        click.option(
            "--notify",
            "notify_url",
            metavar="URL",
            type=optional(click.STRING),
            help="POST this task's notifications here (JSON; default: the fleet's notify-url)."
            + ("" if adding else "  `none` clears it (and its --notify-header)."),
        ),
        click.option(
            "--notify-header",
            "notify_headers",
            multiple=True,
            metavar="'NAME: VALUE'",
            help="HTTP header to send with this task's notifications, to its --notify URL (repeat "
            "for more); the rules of --header; shown as *** when it is a secret."
            + ("" if adding else "  Replaces all of them; `none` clears them."),
        ),
        click.option(
            "--notify-on",
            "notify_on",
            metavar="EVENTS",
            type=optional(click.STRING),
            help="Comma-separated events to notify: failure, timeout, skipped, expired, "
            "deadline (default: the fleet's notify-on, else all but skipped)."
            + ("" if adding else "  `none` clears it."),
        ),
        click.option(
            "--deadline",
            type=optional(DURATION),
            help="Notify `deadline` when a firing has not succeeded by its scheduled time plus "
            "this (queued, running, retrying, skipped or not dispatched); at most the history "
            "retention." + ("" if adding else "  `none` clears it."),
        ),
    ]


def _retry_options(adding: bool) -> list[Option]:
    """How a failed attempt is retried: how many attempts, and the delay before each retry."""
    return [
        click.option("--max-attempts", type=int, default=_default("max_attempts", adding)),
        click.option("--backoff", type=DURATION_OR_ZERO, default=_default("backoff", adding)),
        click.option(
            "--backoff-max",
            type=_optional(DURATION, adding),
            help="Exponential backoff with full jitter: retry n waits uniform(0, min(this, "
            "backoff x 2^(n-1))); without it, --backoff every time."
            + ("" if adding else "  `none` clears it."),
        ),
    ]


def _choice(choices: type[StrEnum]) -> click.Choice[str]:
    """The values as plain strings: click would match Enum members by name."""
    return click.Choice([c.value for c in choices])


def _definition(opts: dict[str, Any], *, adding: bool) -> dict[str, Any]:
    """TaskSpec fields from the parsed options (update: only those given). An `--at` without an
    offset stays a local wall time: TaskSpec.resolved reads it in the task's zone (`--timezone`,
    else, when updating, the task's own) by its DST policies."""
    for option, key in (("--header", "headers"), ("--notify-header", "notify_headers")):
        pairs = header_pairs(option, opts.pop(key))
        if pairs is not None:
            opts[key] = pairs
    if calendars := opts.pop("exclude_calendars"):  # `none` alone: ()
        opts["exclude_calendars"] = () if calendars == ("none",) else tuple(sorted(calendars))
    targets = {k: opts.pop(k) for k in ("command", "http", "call")}
    given = {k: v for k, v in targets.items() if v is not None}
    if len(given) > 1 or (adding and not given):
        raise InvalidTask("give exactly one of --command, --http or --call")
    if isinstance(opts.get("notify_on"), str):
        opts["notify_on"] = events(opts["notify_on"])
    at_text = opts.pop("at_text")
    if at_text is not None:
        opts["at"] = _instant(at_text)
    schedules = [k for k in ("cron", "every", "at") if opts.get(k) is not None]
    if len(schedules) > 1 or (adding and not schedules):
        raise InvalidTask("give exactly one schedule: --cron, --every or --at")
    if given:
        key, target = next(iter(given.items()))
        opts["executor"] = {
            "command": ExecutorKind.SHELL,
            "http": ExecutorKind.HTTP,
            "call": ExecutorKind.PYTHON,
        }[key]
        opts["target"] = target
    if adding:
        return opts
    return {k: None if v is CLEAR else v for k, v in opts.items() if v is not None}


def events(text: str) -> tuple[str, ...]:
    """`--notify-on failure,timeout` as its events (checked by TaskSpec.validate)."""
    return tuple(e.strip() for e in text.split(",") if e.strip())


def _instant(text: str) -> datetime:
    """`--at` as an instant (with an offset) or a local wall time (naive, read in the task's
    zone by TaskSpec.resolved)."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidTask(
            f"--at '{text}' is not an ISO 8601 instant such as 2030-01-01T09:00"
        ) from exc


def _show_task(ctx: click.Context, task: Any, *, show_secrets: bool = False) -> None:
    fields = presentation.task_fields(task, show_secrets=show_secrets)
    emit(ctx, fields, output.pairs(fields))


show_secrets_option = click.option(
    "--show-secrets",
    is_flag=True,
    help="Show secret header values and URL passwords instead of ***.",
)


@tasks.command("add")
@click.argument("name")
@task_options(adding=True)
@json_option
@click.pass_context
def tasks_add(ctx: click.Context, name: str, **opts: Any) -> None:
    """Add a task."""
    spec = TaskSpec(name=name, **_definition(opts, adding=True))
    _show_task(ctx, client_for(ctx).add_task(spec))


@tasks.command("update")
@click.argument("task")
@task_options(adding=False)
@json_option
@click.pass_context
def tasks_update(ctx: click.Context, task: str, **opts: Any) -> None:
    """Change a task's definition; it takes effect from the next firing."""
    client = client_for(ctx)
    changes = _definition(opts, adding=False)
    if not changes:
        raise InvalidTask("nothing to update: give at least one option")
    _show_task(ctx, client.update_task(task, **changes))


@tasks.command("list")
@click.option("--prefix", help="Only the tasks whose name starts with this.")
@click.option("--status", type=_choice(TaskStatus), help="Only the tasks in this status.")
@click.option(
    "--paused/--not-paused", default=None, help="Only the paused (or the not paused) tasks."
)
@paging_options
@show_secrets_option
@json_option
@click.pass_context
def tasks_list(
    ctx: click.Context,
    *,
    prefix: str | None,
    status: str | None,
    paused: bool | None,
    limit: int,
    all_rows: bool,
    after: str | None,
    show_secrets: bool,
) -> None:
    """List the tasks by name, a page at a time."""
    page = client_for(ctx).tasks_page(
        limit=None if all_rows else limit,
        after=after,
        prefix=prefix,
        status=status,
        paused=paused,
    )
    rows = [presentation.task_fields(t, show_secrets=show_secrets) for t in page.rows]
    emit(ctx, rows, output.table(rows, output.TASK_COLUMNS))
    hint_more(page.after)


@tasks.command("show")
@click.argument("task")
@show_secrets_option
@json_option
@click.pass_context
def tasks_show(ctx: click.Context, task: str, show_secrets: bool) -> None:
    """Show one task."""
    _show_task(ctx, client_for(ctx).get_task(task), show_secrets=show_secrets)


@tasks.command("pause")
@click.argument("task")
@click.option(
    "--until",
    "until_text",
    metavar="INSTANT|DURATION",
    help="Resume by itself then (an ISO 8601 instant with an offset, or a duration from now; "
    "database clock).",
)
@json_option
@click.pass_context
def tasks_pause(ctx: click.Context, task: str, until_text: str | None) -> None:
    """Stop firing a task (nothing is owed for firings while paused)."""
    until = None if until_text is None else argument.pause_until(until_text)
    client = client_for(ctx)
    paused = client.pause(task, until=until, actor=operator())
    _show_task(ctx, paused)


@tasks.command("resume")
@click.argument("task")
@json_option
@click.pass_context
def tasks_resume(ctx: click.Context, task: str) -> None:
    """Fire a paused task again, from its next firing after now."""
    client = client_for(ctx)
    resumed = client.resume(task, actor=operator())
    _show_task(ctx, resumed)


@tasks.command("trigger")
@click.argument("task")
@click.option(
    "--count",
    type=int,
    default=1,
    show_default=True,
    help="Queue this many in one transaction (not for an --overlap forbid or replace task).",
)
@click.option(
    "--arg",
    "arg_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="An argument for this occurrence (repeat for more; each value a string).",
)
@click.option(
    "--args-json", metavar="JSON", help="The arguments as one JSON object (instead of --arg)."
)
@json_option
@click.pass_context
def tasks_trigger(
    ctx: click.Context, task: str, count: int, arg_pairs: tuple[str, ...], args_json: str | None
) -> None:
    """Queue a manual occurrence now; it follows the task's overlap policy."""
    from scheduler_daemon.client import TriggerBatch, trigger_text

    args = argument.trigger_args(arg_pairs, args_json)  # before connecting
    occ = client_for(ctx).trigger(
        task, requested_by=who(), count=count, actor=operator(), args=args
    )
    if isinstance(occ, TriggerBatch):
        emit(ctx, dataclasses.asdict(occ), trigger_text(occ))
        return
    emit(ctx, presentation.occurrence_fields(occ), trigger_text(occ))


@tasks.command("delete")
@click.argument("task")
@click.option("--force", is_flag=True, help="Cancel active occurrences instead of refusing.")
@json_option
@click.pass_context
def tasks_delete(ctx: click.Context, task: str, force: bool) -> None:
    """Delete a task; its history stays queryable by id and its name becomes free."""
    ended = client_for(ctx).delete(task, force=force, requested_by=who())
    cancelled = [o.id for o in ended if o.status == OccurrenceStatus.CANCELLED]
    requested = [o.id for o in ended if o.status != OccurrenceStatus.CANCELLED]
    text = f"deleted {task}"
    if cancelled:
        text += f"; cancelled occurrences {cancelled}"
    if requested:
        text += (
            f"; cancel requested for running occurrences {requested} (each keeps its slot "
            "until its owner confirms the job is gone)"
        )
    emit(
        ctx,
        {
            "deleted": task,
            "cancelled_occurrence_ids": cancelled,
            "cancel_requested_occurrence_ids": requested,
        },
        text,
    )
