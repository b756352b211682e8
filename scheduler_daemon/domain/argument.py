"""Input errors that are not about one task (a count, a limit, a status filter, a fleet setting):
InvalidArgument and the checks that raise it (pure)."""

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from scheduler_daemon.domain import json_text, limit, partitioning
from scheduler_daemon.domain.duration import format_duration, parse_duration
from scheduler_daemon.domain.status import NOTIFY_ON_CHOICES, OccurrenceStatus, TaskStatus
from scheduler_daemon.domain.task import (
    InvalidTask,
    bound_headers,
    check_headers,
    header_pairs,
    headers_size,
)

OCCURRENCE_STATUSES = tuple(OccurrenceStatus)
TASK_STATUSES = tuple(TaskStatus)
# `config set` names and the fleet_setting keys they write.
FLEET_SETTINGS = {
    "max-concurrent-runs": "max_concurrent_runs",
    "history-retention": "history_retention",
    "history-partition-interval": "history_partition_interval",
    "notify-url": "notify_url",
    "notify-on": "notify_on",
    "notify-headers": "notify_headers",
}
# The settings that give notifications (ADR 0016).
NOTIFY_SETTINGS = frozenset({"notify_url", "notify_on", "notify_headers"})
# stored as duration text
DURATION_SETTINGS = frozenset({"history-retention", "history-partition-interval"})


class InvalidArgument(ValueError):
    """An argument breaks a rule; the message is one line, fit for the CLI (exit code 2)."""


def at_least_one(value: int, flag: str) -> int:
    if value < 1:
        raise InvalidArgument(f"{flag} must be at least 1")
    return value


def count_within(value: int, flag: str, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise InvalidArgument(f"{flag} must be 1 to {most:,}, got {value}")
    return value


def status_filter(status: str | None) -> str | None:
    """A `runs list --status` value: any occurrence or run status (run statuses are a subset)."""
    if status is not None and status not in OCCURRENCE_STATUSES:
        raise InvalidArgument(
            f"unknown status '{status}': choose one of {', '.join(OCCURRENCE_STATUSES)}"
        )
    return status


def task_status_filter(status: str | None) -> str | None:
    """A `tasks list --status` value."""
    if status is not None and status not in TASK_STATUSES:
        raise InvalidArgument(
            f"unknown status '{status}': choose one of {', '.join(TASK_STATUSES)}"
        )
    return status


def history_cursor(text: str) -> tuple[int, int | None]:
    """A `runs list --after` cursor: `OCCURRENCE_ID:RUN_ID` after a run row, `OCCURRENCE_ID`
    after an occurrence's own row."""
    occurrence, colon, run = text.strip().partition(":")
    if _id(occurrence) is not None and (not colon or _id(run) is not None):
        return int(occurrence), int(run) if colon else None
    raise InvalidArgument(
        f"--after '{text}' is not a cursor: give the last row's occurrence_id, then ':' and its "
        "id when it has one (4711:5120, or 4711)"
    )


def notify_headers_setting(name: str, given: Sequence[str]) -> dict[str, str] | None:
    """`config set notify-headers 'NAME: VALUE'...`, a header each, with the rules of
    `--notify-header`; None for `none` (no fleet headers)."""
    try:
        headers = header_pairs(name, given)
        if not headers:
            return None
        bound_headers(name, headers)
        check_headers(name, headers, setter="the deliverer")
        headers_size(name, headers)
    except (InvalidTask, limit.OutOfBounds) as exc:
        raise InvalidArgument(str(exc)) from None
    return dict(headers)


def notify_setting(name: str, value: str) -> str | list[str] | None:
    """`config set notify-url URL` (an http(s) URL) or `notify-on EVENTS` (comma-separated);
    None for `none` (no fleet default)."""
    if value.strip().lower() == "none":
        return None
    if name == "notify-url":
        limit.url(name, value)
        return limit.http_url(name, value)  # OutOfBounds: InvalidArgument in fleet_setting
    events = [e.strip() for e in value.split(",") if e.strip()]
    for event in events:
        if event not in NOTIFY_ON_CHOICES:
            raise InvalidArgument(
                f"notify-on: unknown event '{event[:40]}'; the events are "
                + ", ".join(NOTIFY_ON_CHOICES)
            )
    if not events or len(set(events)) != len(events):
        raise InvalidArgument("notify-on needs distinct events, comma-separated (or `none`)")
    return events


def fleet_setting(
    name: str, given: str | Sequence[str]
) -> tuple[str, int | str | list[str] | dict[str, str] | None]:
    """A `config set NAME VALUE`: the stored key and its value (a whole number, or for a
    duration setting its duration text, None for `none`: keep everything), within its bound
    (domain/limit.py). `notify-headers` takes a VALUE per header, every other setting one."""
    if name not in FLEET_SETTINGS:
        raise InvalidArgument(
            f"unknown setting '{name}': choose one of {', '.join(FLEET_SETTINGS)}"
        )
    values = [given] if isinstance(given, str) else list(given)
    if name == "notify-headers":
        return FLEET_SETTINGS[name], notify_headers_setting(name, values)
    if len(values) != 1:
        raise InvalidArgument(f"{name} takes one VALUE, got {len(values)}")
    (value,) = values
    if FLEET_SETTINGS[name] in NOTIFY_SETTINGS:
        try:
            return FLEET_SETTINGS[name], notify_setting(name, value)
        except limit.OutOfBounds as exc:
            raise InvalidArgument(str(exc)) from None
    if name in DURATION_SETTINGS:
        if value.strip().lower() == "none":
            return FLEET_SETTINGS[name], None
        unset = "to keep all" if name == "history-retention" else "for the default, 1d"
        try:
            bounded = limit.duration("duration", parse_duration(value))
            if name == "history-partition-interval":
                partitioning.check_interval(bounded)
        except partitioning.BadPartitioning as exc:
            raise InvalidArgument(str(exc)) from None
        except ValueError as exc:  # OutOfBounds too
            raise InvalidArgument(f"{name}: {exc} (or `none` {unset})") from None
        return FLEET_SETTINGS[name], format_duration(bounded)
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise InvalidArgument(f"{name} must be a whole number of at least 1, got {value!r}")
    try:
        return FLEET_SETTINGS[name], limit.whole(name, int(value), most=limit.MAX_CONCURRENT_RUNS)
    except limit.OutOfBounds as exc:
        raise InvalidArgument(str(exc)) from None


def task_ref(ref: str | int) -> str | int | None:
    """A TASK argument as the stores look it up (an id within bigint, or a name), or None when
    no task can have it: an id past bigint, digits other than 0-9 (names cannot be all digits),
    a NUL or a surrogate (a name cannot hold them)."""
    if isinstance(ref, int) and not isinstance(ref, bool):
        return ref if 0 < ref <= limit.INT8_MAX else None
    if not isinstance(ref, str):
        return None
    if ref.isdigit():
        return _id(ref)
    try:
        limit.text("TASK", ref)
    except limit.OutOfBounds:
        return None
    return ref


def search_text(label: str, value: str | None) -> str | None:
    """A `--prefix` or `--after` name to search by: text the database can compare."""
    if value is not None:
        try:
            limit.text(label, value)
        except limit.OutOfBounds as exc:
            raise InvalidArgument(str(exc)) from None
    return value


def _id(text: str) -> int | None:
    """Digits 0-9 of a bigint id, as an int; None for anything else."""
    if text.isascii() and text.isdigit() and int(text) <= limit.INT8_MAX:
        return int(text)
    return None


def trigger_args(pairs: Sequence[str], args_json: str | None) -> dict[str, Any] | None:
    """`tasks trigger`'s arguments: `--arg KEY=VALUE` (repeatable, each value a string) or
    `--args-json` (a JSON object), not both; None when neither is given. At most
    limit.MAX_ARGS_BYTES as compact JSON; InvalidArgument (one line) otherwise."""
    if pairs and args_json is not None:
        raise InvalidArgument("give --arg or --args-json, not both")
    if args_json is not None:
        try:  # depth first: the decoder recurses, ~1,000 levels raised RecursionError
            args = json_text.loads_bounded(args_json, json_text.MAX_DEPTH)
        except json_text.UndecodableJson as exc:
            raise InvalidArgument(f"--args-json is {exc}") from None  # not JSON; JSON nested
        if not isinstance(args, dict):
            raise InvalidArgument("--args-json must be a JSON object ({...})")
    elif pairs:
        args = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise InvalidArgument(f"--arg {pair!r} is not KEY=VALUE")
            if key in args:
                raise InvalidArgument(f"--arg {key!r} given twice")
            args[key] = value
    else:
        return None
    return checked_args(args)


def checked_args(args: object) -> dict[str, Any]:
    """Arguments as any caller gives them (the CLI's, the console's, `Client.trigger`'s): a JSON
    object that PostgreSQL can store, nesting at most json_text.MAX_DEPTH levels (measured
    without recursion, so a value deep enough to break json.dumps is refused, not raised), at
    most limit.MAX_ARGS_BYTES as compact UTF-8 JSON (the form a shell job gets in
    SCHEDULER_ARGS); InvalidArgument (one line) otherwise."""
    if not isinstance(args, dict):
        raise InvalidArgument("the arguments must be a JSON object ({...})")
    if json_text.deeper_than(args, json_text.MAX_DEPTH):  # before json.dumps, which recurses
        raise InvalidArgument(
            f"the arguments nest more than {json_text.MAX_DEPTH} levels deep "
            "(an object or array is one level)"
        )
    try:
        text = json.dumps(args, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        size = len(text.encode())
    except (TypeError, ValueError) as exc:  # a value JSON cannot hold; a lone surrogate
        raise InvalidArgument(f"the arguments are not a JSON object: {exc}") from None
    if size > limit.MAX_ARGS_BYTES:
        raise InvalidArgument(
            f"the arguments are {size:,} bytes as JSON; at most {limit.MAX_ARGS_BYTES:,}"
        )
    if "\\u0000" in text.replace("\\\\", ""):  # a NUL's escape, not an escaped backslash's
        raise InvalidArgument("the arguments contain a NUL, which PostgreSQL cannot store")
    return args


def pause_until(text: str) -> datetime | timedelta:
    """`tasks pause --until` (and the console's pause end): a duration from now (30m, PT2H) or an
    ISO 8601 instant; InvalidTask (one line) for anything else. Whether it has an offset and is
    after now is judged on the database clock (control.pause_end)."""
    try:
        return parse_duration(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidTask(
            f"--until '{text}' is neither a duration (30m, PT2H) nor an ISO 8601 instant "
            "such as 2030-01-01T09:00Z"
        ) from None
