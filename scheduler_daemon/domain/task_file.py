"""Task files for `tasks apply` and `tasks export`: TOML, one table per task (pure).

A table's keys are the options of `tasks add` without their dashes' leading `--`
(`misfire-grace = "1m"`; underscores work too), `headers` and `notify-headers` are tables of
header values, durations are strings (`"30s"`, `"PT1H"`) or numbers of seconds, and `at` is a
TOML datetime or an ISO 8601 string (without an offset: a local time in the task's `timezone`,
read by its `dst-gap` and `dst-overlap` as `tasks add --at` reads it). A file is UTF-8 (a
byte-order mark at its start is allowed) of at most 10 MiB, nested at most 100 deep. A header
value (of either table) may hold `${VAR}` references to variables named `SCHEDULER_SECRET_*` (no
others: the applier's environment also holds its own database URL), resolved when the file is
applied and shown as `***` to every reader; `tasks export` writes the reference back, and a
secret header value without one as `***`, which `apply` reads as "keep the value stored" (never
a new value).
"""

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any

from scheduler_daemon.domain import limit
from scheduler_daemon.domain.duration import format_duration, parse_duration
from scheduler_daemon.domain.schedule.zone import gap_start
from scheduler_daemon.domain.secret import MASK, is_secret_header, reader_masked_url, redact
from scheduler_daemon.domain.status import DstGapPolicy, ExecutorKind, ScheduleKind, TaskStatus
from scheduler_daemon.domain.task import InvalidTask, TaskRecord, TaskSpec

_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
SOURCE_KEY = "source"
"""A top-level string of this name is the file's source, not a task."""
SECRET_PREFIX = "SCHEDULER_SECRET_"  # noqa: S105 - a variable name's prefix, not a secret
"""The only variables a task file's `${VAR}` may name."""
_TARGETS = {"command": ExecutorKind.SHELL, "http": ExecutorKind.HTTP, "call": ExecutorKind.PYTHON}
_TARGET_OF = {kind: key for key, kind in _TARGETS.items()}
_DURATIONS = {
    "every": "every",
    "misfire-grace": "misfire_grace",
    "catchup-window": "catchup_window",
    "start-deadline": "start_deadline",
    "timeout": "timeout",
    "backoff": "backoff",
    "backoff-max": "backoff_max",
    "spread": "spread",
    "history-retention": "history_retention",
    "deadline": "deadline",
}
_TEXTS = {
    "cron": "cron",
    "timezone": "timezone",
    "concurrency-key": "concurrency_key",
    "overlap": "overlap",
    "misfire": "misfire",
    "dst-gap": "dst_gap",
    "dst-overlap": "dst_overlap",
}
_INTS = {"catchup-limit": "catchup_limit", "max-attempts": "max_attempts"}
_FLAGS = {"paused": "paused", "in-process": "in_process"}
# The header tables: their TaskSpec fields, the values and the `${VAR}` templates.
_HEADERS = {
    "headers": ("headers", "header_refs"),
    "notify-headers": ("notify_headers", "notify_header_refs"),
}
FIELDS = (
    *_TEXTS,
    *_DURATIONS,
    *_INTS,
    "at",
    *_FLAGS,
    *_HEADERS,
    *_TARGETS,
    "notify",
    "notify-on",
    "exclude-calendars",
)
_DEFAULTS = {f.name: f.default for f in fields(TaskSpec)}


def decode(data: bytes) -> str:
    """A task file's bytes as text: UTF-8, a byte-order mark at the start skipped, at most
    MAX_TASK_FILE_BYTES (the caller reads at most one byte more)."""
    if len(data) > limit.MAX_TASK_FILE_BYTES:
        raise InvalidTask(
            f"the task file is larger than {limit.MAX_TASK_FILE_BYTES // 1024 // 1024} MiB"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidTask(
            f"the task file is not UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}"
        ) from None


def parse(text: str, env: Mapping[str, str]) -> dict[str, TaskSpec]:
    """The tasks a file defines, validated as `tasks add` validates them (no database rules),
    by name in file order; InvalidTask naming the task and the field at fault."""
    return read(text, env)[1]


def read(text: str, env: Mapping[str, str]) -> tuple[str | None, dict[str, TaskSpec]]:
    """The file's own `source = "..."` (a top-level string: the name `tasks apply` records on
    the tasks it creates, the same from every checkout), or None, and its tasks (`parse`)."""
    text = text.removeprefix("\ufeff")  # a byte-order mark, read as text
    if len(text) > limit.MAX_TASK_FILE_BYTES:
        raise InvalidTask(
            f"the task file is larger than {limit.MAX_TASK_FILE_BYTES // 1024 // 1024} MiB"
        )
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidTask(f"not a valid TOML file: {exc}") from None
    except RecursionError:  # nested past what the parser can follow: far past the limit
        document = None
    if document is None or _depth(document) > limit.MAX_TASK_FILE_DEPTH:
        raise InvalidTask(
            f"the task file is nested more than {limit.MAX_TASK_FILE_DEPTH} tables or arrays deep"
        )
    specs = {}
    source = document.pop(SOURCE_KEY, None) if isinstance(document.get(SOURCE_KEY), str) else None
    if source is not None:
        limit.name(SOURCE_KEY, source, most=limit.MAX_SOURCE_LENGTH)
    for name, table in document.items():
        if not isinstance(table, dict):
            raise InvalidTask(f"'{name}': each task is a table ([{json.dumps(name)}])")
        spec = _spec(name, table, env)
        try:
            spec.validate()
        except InvalidTask as exc:
            raise InvalidTask(f"task '{name}': {exc}") from exc
        specs[name] = spec
    return source, specs


def _depth(document: dict[str, Any]) -> int:
    """How many tables and arrays deep the document is (itself 1), without recursion."""
    deepest = 0
    stack: list[tuple[dict[str, Any] | list[Any], int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        deepest = max(deepest, depth)
        children = value.values() if isinstance(value, dict) else value
        stack += [(c, depth + 1) for c in children if isinstance(c, dict | list)]
    return deepest


def _spec(  # noqa: PLR0912 - one branch per kind of field, in one place
    name: str, table: dict[str, Any], env: Mapping[str, str]
) -> TaskSpec:
    values: dict[str, Any] = {"name": name}
    table = {k.replace("_", "-"): v for k, v in table.items()}

    def fail(key: str, message: str) -> InvalidTask:
        return InvalidTask(f"task '{name}': field '{key}': {message}")

    unknown = sorted(set(table) - set(FIELDS))
    if unknown:
        raise fail(unknown[0], f"unknown field; the fields are {', '.join(FIELDS)}")
    targets = [k for k in _TARGETS if k in table]
    if len(targets) != 1:
        raise InvalidTask(f"task '{name}': give exactly one of command, http or call")
    values["executor"] = _TARGETS[targets[0]]
    for key, value in table.items():
        if key in _TARGETS:
            if not isinstance(value, str):
                raise fail(key, "must be a string")
            values["target"] = value
        elif key in _TEXTS:
            if not isinstance(value, str):
                raise fail(key, "must be a string")
            values[_TEXTS[key]] = value
        elif key in _DURATIONS:
            values[_DURATIONS[key]] = _duration(value, lambda m, k=key: fail(k, m))
        elif key in _INTS:
            if not isinstance(value, int) or isinstance(value, bool):
                raise fail(key, "must be a whole number")
            values[_INTS[key]] = value
        elif key in _FLAGS:
            if not isinstance(value, bool):
                raise fail(key, "must be true or false")
            values[_FLAGS[key]] = value
        elif key == "notify":
            if not isinstance(value, str):
                raise fail(key, "must be a string (an http:// or https:// URL)")
            values["notify_url"] = value
        elif key == "notify-on":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise fail(key, 'must be a list of events such as ["failure", "timeout"]')
            values["notify_on"] = tuple(value)
        elif key == "exclude-calendars":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise fail(key, 'must be a list of calendar names such as ["holidays"]')
            values["exclude_calendars"] = tuple(sorted(value))
        elif key in _HEADERS:
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise fail(key, "must be a table of strings")
            values[_HEADERS[key][0]], values[_HEADERS[key][1]] = _headers(key, value, env, fail)
    if "at" in table:
        values["at"] = _at(table["at"], lambda m: fail("at", m))
    return TaskSpec(**values)


def _duration(value: Any, fail: Any) -> timedelta:
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value <= 0:
            raise fail("must be positive")
        try:
            return limit.seconds("duration", value)
        except limit.OutOfBounds as exc:
            raise fail(str(exc)) from None
    if not isinstance(value, str):
        raise fail('must be a duration such as "30s"')
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise fail(str(exc)) from exc


def _at(value: Any, fail: Any) -> datetime:
    """An instant (with an offset), or a local wall time (naive): TaskSpec.resolved reads it in
    the task's `timezone` by its `dst-gap` and `dst-overlap`, as `tasks add --at` does."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise fail("not an ISO 8601 instant such as 2030-01-01T09:00") from exc
    if not isinstance(value, datetime):
        raise fail("must be a date and time")
    return value


def _headers(
    key: str, given: dict[str, str], env: Mapping[str, str], fail: Any
) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """The values of header table `key` with `${VAR}` resolved, and the templates of those that
    had any."""
    values, refs = [], []
    for header, template in given.items():
        foreign = [v for v in _REF.findall(template) if not v.startswith(SECRET_PREFIX)]
        if foreign:
            raise fail(
                key,
                f"header {header}: ${{{foreign[0]}}} is not resolved: only variables named "
                f"{SECRET_PREFIX}* are (export it as {SECRET_PREFIX}{foreign[0]})",
            )
        missing = [v for v in _REF.findall(template) if v not in env]
        if missing:
            raise fail(key, f"header {header} needs the environment variable {missing[0]}, unset")
        values.append((header, _REF.sub(lambda m: env[m.group(1)], template)))
        if _REF.search(template):
            refs.append((header, template))
    return tuple(values), tuple(refs)


def keep_masked(new: TaskSpec, old: TaskSpec | None, name: str) -> TaskSpec:
    """`new` with every `***` that `export` wrote for a secret replaced by the stored value;
    InvalidTask when there is no stored value to keep."""
    kept: dict[str, Any] = {}
    for key, (field, refs) in _HEADERS.items():
        stored = dict(getattr(old, field)) if old is not None else {}
        kept[field] = _kept_headers(f"task '{name}': field '{key}'", new, field, refs, stored)
        kept[refs] = getattr(new, refs)
    target = new.target
    if old is not None:  # the database masks an http task's URL for the reader, not a command
        target = _kept_url(target, old.target, reader=new.executor == ExecutorKind.HTTP)
    notify_url = new.notify_url
    if old is not None and old.notify_url is not None and notify_url is not None:
        notify_url = _kept_url(notify_url, old.notify_url, reader=True)
    return new.with_changes(**kept, target=target, notify_url=notify_url)


def _kept_url(new: str, stored: str, *, reader: bool) -> str:
    """`stored` when `new` is it as `export` masked it (its password: redact; or, with
    `reader`, as the database masks it for the reader role: reader_masked_url, ADR 0031),
    else `new`."""
    masked = {redact(stored), reader_masked_url(stored)} if reader else {redact(stored)}
    return stored if new != stored and MASK in new and new in masked else new


def _kept_headers(
    where: str, new: TaskSpec, field: str, refs: str, stored: dict[str, str]
) -> tuple[tuple[str, str], ...]:
    """The header table `field` of `new` with each `***` that has no `${VAR}` reference (in
    `refs`) replaced by the `stored` value; InvalidTask (`where`) when there is none."""
    headers, templates = [], dict(getattr(new, refs))
    for header, value in getattr(new, field):
        if value != MASK or templates.get(header) is not None:
            headers.append((header, value))
        elif header in stored:
            headers.append((header, stored[header]))
        else:
            raise InvalidTask(
                f"{where}: header {header} is masked (***) with no stored value to keep; give "
                "it or a ${VAR} reference"
            )
    return tuple(headers)


def exported(task: TaskRecord) -> TaskSpec:
    """The definition `render` writes for a stored task: its spec, but for a one-shot whose
    local `--at` a DST gap swallowed under `dst-gap = "skip"` (it holds the gap's end and was
    `cancelled` when written, ADR 0019) the gap's first wall time without an offset, which
    `apply` reads back to the same task, skipped again, in this database or another. Its
    instant alone would make a task that fires there."""
    spec = task.spec
    if (
        spec.schedule_kind != ScheduleKind.ONCE
        or task.status != TaskStatus.CANCELLED
        or spec.dst_gap != DstGapPolicy.SKIP
        or spec.at is None
        or spec.at.tzinfo is None
    ):
        return spec
    wall = gap_start(spec.at, spec.timezone)
    return spec if wall is None else spec.with_changes(at=wall)


def render(
    specs: list[TaskSpec], *, include_secrets: bool = False, source: str | None = None
) -> str:
    """The tasks as a file `parse` reads back to the same definitions (secrets masked unless
    `include_secrets`, `${VAR}` references written back as they were given), `source = ...`
    first when given."""
    blocks = [] if source is None else [f"{SOURCE_KEY} = {json.dumps(source)}"]
    for spec in specs:
        lines = [f"[{json.dumps(spec.name)}]"]
        target = spec.target
        if spec.executor == ExecutorKind.HTTP and not include_secrets:
            target = redact(target)
        lines.append(f"{_TARGET_OF[ExecutorKind(spec.executor)]} = {json.dumps(target)}")
        if spec.cron is not None:
            lines.append(f"cron = {json.dumps(spec.cron)}")
        if spec.at is not None:
            lines.append(f"at = {spec.at.isoformat()}")
        for key, attr in {**_TEXTS, **_DURATIONS, **_INTS}.items():
            value = getattr(spec, attr)
            if key == "cron" or value == _DEFAULTS[attr]:
                continue
            if isinstance(value, timedelta):
                value = format_duration(value)
            lines.append(f"{key} = {json.dumps(value)}")
        lines += [f"{key} = true" for key, attr in _FLAGS.items() if getattr(spec, attr)]
        if spec.notify_url is not None:
            url = spec.notify_url if include_secrets else redact(spec.notify_url)
            lines.append(f"notify = {json.dumps(url)}")
        if spec.notify_on is not None:
            lines.append(f"notify-on = {json.dumps(list(spec.notify_on))}")
        if spec.exclude_calendars:
            lines.append(f"exclude-calendars = {json.dumps(list(spec.exclude_calendars))}")
        for key, (field, refs) in _HEADERS.items():
            headers = getattr(spec, field)
            if headers:
                shown = _shown_headers(headers, dict(getattr(spec, refs)), include_secrets)
                pairs = ", ".join(f"{json.dumps(h)} = {json.dumps(v)}" for h, v in shown.items())
                lines.append(f"{key} = {{ {pairs} }}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n" if blocks else ""


def _shown_headers(
    headers: tuple[tuple[str, str], ...], refs: dict[str, str], include_secrets: bool
) -> dict[str, str]:
    """The headers as `export` writes them: every value as stored with `include_secrets`, else
    its `${VAR}` reference, else `***` for a secret header."""
    if include_secrets:
        return dict(headers)
    return {h: refs.get(h) or (MASK if is_secret_header(h) else v) for h, v in headers}
