"""The task definition: its fields, their defaults, and the rules a valid task obeys (pure)."""

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from scheduler_daemon.domain import limit
from scheduler_daemon.domain.duration import format_duration
from scheduler_daemon.domain.limit import MAX_NAME_LENGTH, MAX_PAYLOAD_BYTES, OutOfBounds
from scheduler_daemon.domain.row import FromRow
from scheduler_daemon.domain.schedule import make_schedule
from scheduler_daemon.domain.schedule.base import ScheduleError
from scheduler_daemon.domain.schedule.cron import CronSchedule
from scheduler_daemon.domain.schedule.cron_syntax import validate_cron
from scheduler_daemon.domain.schedule.fixed import IntervalSchedule, OneShotSchedule
from scheduler_daemon.domain.schedule.zone import load_zone, read_wall
from scheduler_daemon.domain.spread import spread_refusal
from scheduler_daemon.domain.status import (
    NOTIFY_ON_CHOICES,
    DstGapPolicy,
    DstOverlapPolicy,
    ExecutorKind,
    MisfirePolicy,
    OverlapPolicy,
    ScheduleKind,
)

__all__ = ["MAX_NAME_LENGTH", "MAX_PAYLOAD_BYTES", "InvalidTask", "TaskRecord", "TaskSpec"]
# The payload key that holds each executor's target.
PAYLOAD_KEY: dict[str, str] = {
    ExecutorKind.SHELL: "command",
    ExecutorKind.HTTP: "url",
    ExecutorKind.PYTHON: "target",
}
_PYTHON_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an RFC 9110 token
# Headers the http executor sets itself: the body is its JSON, the key is the occurrence's.
RESERVED_HEADERS = ("content-type", "content-length", "idempotency-key", "host")


class InvalidTask(ValueError):
    """A task definition breaks a rule; the message is one line, fit for the CLI."""


@dataclass(frozen=True)
class TaskSpec:
    """What an operator asks for. Durations are timedeltas; `None` means "not set"."""

    name: str
    executor: str
    target: str  # the shell command, the URL, or module:function
    cron: str | None = None
    every: timedelta | None = None
    # An instant (aware), or a local wall time (naive) in `timezone`, which `resolved` reads by
    # the DST policies as cron reads its wall times; the database holds the instant.
    at: datetime | None = None
    timezone: str = "UTC"
    dst_gap: str = DstGapPolicy.SHIFT
    dst_overlap: str = DstOverlapPolicy.FIRST
    concurrency_key: str | None = None
    overlap: str = OverlapPolicy.FORBID
    misfire: str = MisfirePolicy.RUN_ONCE
    misfire_grace: timedelta = timedelta(seconds=60)
    catchup_limit: int | None = None
    catchup_window: timedelta | None = None
    start_deadline: timedelta | None = None
    timeout: timedelta | None = None
    max_attempts: int = 1
    backoff: timedelta = timedelta(seconds=30)
    # With it, the delay before retry n is uniform(0, min(backoff_max, backoff x 2^(n-1)))
    # (domain.outcome.retry_delay); without it, `backoff` every time.
    backoff_max: timedelta | None = None
    paused: bool = False
    anchor: datetime | None = field(default=None, compare=False)
    headers: tuple[tuple[str, str], ...] = ()  # http only: (name, value) pairs sent as given
    history_retention: timedelta | None = None  # None: the fleet's history-retention
    in_process: bool = False  # python only: run by the daemon's in-process executor (ADR 0010)
    # `tasks apply`: the `${VAR}` template each header value was resolved from, so that
    # `tasks export` writes the reference, not the secret.
    header_refs: tuple[tuple[str, str], ...] = ()
    # Notifications (ADR 0016): where this task's are POSTed (None: the fleet's notify-url)
    # and which events (None: the fleet's notify-on, else every one but `skipped`).
    notify_url: str | None = None
    notify_on: tuple[str, ...] | None = None
    # A firing not succeeded by its scheduled time plus this notifies `deadline` (None: never).
    deadline: timedelta | None = None
    # Each firing starts no earlier than its nominal time plus a deterministic offset in
    # [0, spread) (domain/spread.py); None: at its nominal time.
    spread: timedelta | None = None
    # The headers POSTed with this task's notifications, to its own notify URL only (the fleet's
    # URL gets the fleet's notify-headers), and the `${VAR}` templates they came from (`tasks
    # apply`): the http executor's `headers` and `header_refs`, with its rules.
    notify_headers: tuple[tuple[str, str], ...] = ()
    notify_header_refs: tuple[tuple[str, str], ...] = ()
    # The calendars whose dates exclude its firings (ADR 0025), by name, sorted; (): none.
    exclude_calendars: tuple[str, ...] = ()

    @property
    def schedule_kind(self) -> ScheduleKind:
        if self.cron is not None:
            return ScheduleKind.CRON
        return ScheduleKind.INTERVAL if self.every is not None else ScheduleKind.ONCE

    @property
    def payload(self) -> dict[str, Any]:
        key = PAYLOAD_KEY[self.executor]
        payload: dict[str, Any] = {key: self.target}
        if self.headers:
            payload["headers"] = dict(self.headers)
        if self.header_refs:
            payload["header_refs"] = dict(self.header_refs)
        return payload

    def schedule(self) -> CronSchedule | IntervalSchedule | OneShotSchedule:
        """The schedule object that computes this task's fire times (a local `at` read by
        `resolved`: none when its wall time is skipped)."""
        if self.cron is None and self.every is not None and self.anchor is None:
            raise InvalidTask("an interval schedule needs its anchor (the creation time)")
        spec, skipped = self.resolved()
        if skipped and spec.at is not None:
            return OneShotSchedule(spec.at, skipped=True)
        return make_schedule(
            cron=self.cron,
            every=self.every,
            at=spec.at,
            timezone=self.timezone,
            dst_gap=self.dst_gap,
            dst_overlap=self.dst_overlap,
            anchor=self.anchor,
        )

    def resolved(self) -> "tuple[TaskSpec, bool]":
        """This spec with a local (naive) `at` read as an instant in `timezone` by `dst_gap`
        and `dst_overlap` (zone.read_wall), and whether its one firing is skipped (a wall time
        in a DST gap under `skip`: `at` is then the gap's end, where that firing is recorded).
        An aware `at` is an instant already: kept as it is. InvalidTask, one line, for a wall
        time that happens twice under `--dst-overlap both` (a one-shot fires once)."""
        if self.at is None or self.at.tzinfo is not None:
            return self, False
        try:
            found = read_wall(self.at, self.timezone, self.dst_gap, self.dst_overlap)
        except ScheduleError as exc:
            raise InvalidTask(f"--at {exc}") from None
        return replace(self, at=found.at), found.skipped

    def with_changes(self, **changes: Any) -> "TaskSpec":
        """A copy with `changes` applied; setting one schedule kind clears the others."""
        if any(changes.get(k) is not None for k in ("cron", "every", "at")):
            changes = {"cron": None, "every": None, "at": None, **changes}
        if (
            changes.get("executor", ExecutorKind.HTTP) != ExecutorKind.HTTP
            and "headers" not in changes
        ):
            changes["headers"] = ()  # headers belong to the http target they were given with
        if (
            changes.get("executor", ExecutorKind.PYTHON) != ExecutorKind.PYTHON
            and "in_process" not in changes
        ):
            changes["in_process"] = False  # in-process belongs to the python target
        if (
            "notify_url" in changes
            and changes["notify_url"] is None
            and "notify_headers" not in changes
        ):
            changes["notify_headers"] = ()  # notify headers belong to the URL they were given with
        if "headers" in changes and "header_refs" not in changes:
            changes["header_refs"] = ()  # new values, given as they are
        if "notify_headers" in changes and "notify_header_refs" not in changes:
            changes["notify_header_refs"] = ()
        return replace(self, **changes)

    def validate(self, now: datetime | None = None, *, new_instant: bool = True) -> None:
        """Raises InvalidTask for the first rule this spec breaks. `now` is the database clock;
        without it the rules that need the clock (`--at` in the past) are not checked. Every
        value is held to its bound in domain/limit.py first."""
        try:
            self._validate_bounds(now)
        except OutOfBounds as exc:
            raise InvalidTask(str(exc)) from None
        _check(
            self.name.strip() == self.name,
            f"task name must be 1 to {MAX_NAME_LENGTH} characters without surrounding spaces",
        )
        _check(not self.name.isdigit(), f"task name '{self.name}' must not be all digits (ids are)")
        kinds = [k for k in (self.cron, self.every, self.at) if k is not None]
        _check(len(kinds) == 1, "give exactly one schedule: --cron, --every or --at")
        _check_choice("executor", self.executor, ExecutorKind)
        _check_choice("overlap", self.overlap, OverlapPolicy)
        _check_choice("misfire", self.misfire, MisfirePolicy)
        _check_choice("dst-gap", self.dst_gap, DstGapPolicy)
        _check_choice("dst-overlap", self.dst_overlap, DstOverlapPolicy)
        try:
            load_zone(self.timezone)
            if self.cron is not None:
                validate_cron(self.cron)
        except ScheduleError as exc:
            raise InvalidTask(str(exc)) from exc
        if self.at is not None:
            at = self.resolved()[0].at  # a local wall time read in its zone (policies checked)
            assert at is not None
            if self.at.tzinfo is None:
                _check_instant(at, now)
            _check(
                now is None or not new_instant or at > now,
                f"--at {self.at.isoformat()} is in the past (database time {now})",
            )
        _check(
            not (
                self.misfire == MisfirePolicy.RUN_ALL
                and self.overlap in (OverlapPolicy.FORBID, OverlapPolicy.REPLACE)
            ),
            f"--misfire run_all with --overlap {self.overlap} could only skip; use --overlap queue "
            "or allow",
        )
        _check(
            self.backoff_max is None or self.backoff_max >= self.backoff,
            f"--backoff-max {format_duration(self.backoff_max or timedelta(0))} is below "
            f"--backoff {format_duration(self.backoff)}",
        )
        _check(
            self.backoff_max is None or self.backoff > timedelta(0),
            "--backoff-max needs a --backoff above zero (each delay doubles from it)",
        )
        self._validate_target()
        if self.spread is not None and now is not None:  # the schedule's next firings from now
            _check_spread(self, now)

    def _validate_bounds(self, now: datetime | None) -> None:
        """Each value within its bound (domain/limit.py), before the rules that use them."""
        limit.name("task name", self.name)
        if self.concurrency_key is not None:
            limit.name("--concurrency-key", self.concurrency_key)
        for label, text in (("--timezone", self.timezone), ("--cron", self.cron)):
            if text is not None:
                limit.name(label, text, most=limit.MAX_CRON_LENGTH)
        for label, value in self._durations().items():
            if value is not None:
                limit.duration(label, value)
        limit.duration("--misfire-grace", self.misfire_grace, allow_zero=True)
        limit.duration("--backoff", self.backoff, allow_zero=True)
        limit.whole("--max-attempts", self.max_attempts)
        if self.catchup_limit is not None:
            limit.whole("--catchup-limit", self.catchup_limit)
        if self.at is not None:
            _check_instant(self.at, now)
        limit.text(f"the {self.executor} target", self.target)
        bound_headers("--header", self.headers)
        bound_headers("--notify-header", self.notify_headers)
        for calendar in self.exclude_calendars:
            limit.name("--exclude-calendar", calendar)
        if len(self.exclude_calendars) > limit.MAX_TASK_CALENDARS:
            raise OutOfBounds(f"--exclude-calendar: at most {limit.MAX_TASK_CALENDARS} calendars")
        if len(set(self.exclude_calendars)) != len(self.exclude_calendars):
            raise OutOfBounds("--exclude-calendar: a calendar is given twice")

    def _durations(self) -> dict[str, timedelta | None]:
        return {
            "--every": self.every,
            "--catchup-window": self.catchup_window,
            "--start-deadline": self.start_deadline,
            "--timeout": self.timeout,
            "--history-retention": self.history_retention,
            "--deadline": self.deadline,
            "--backoff-max": self.backoff_max,
        }

    def _validate_target(self) -> None:
        _check(bool(self.target.strip()), f"the {self.executor} target must not be empty")
        if self.executor == ExecutorKind.HTTP:
            _check_url("--http", self.target)
        if self.executor == ExecutorKind.PYTHON:
            _check(
                _PYTHON_TARGET.match(self.target) is not None,
                f"--call needs MODULE:FUNCTION, got '{self.target[:80]}'",
            )
        _check(
            not self.in_process or self.executor == ExecutorKind.PYTHON,
            "--in-process is for --call (python) tasks only",
        )
        _check(
            not self.headers or self.executor == ExecutorKind.HTTP,
            "--header is for --http tasks only",
        )
        check_headers("--header", self.headers, setter="the http executor")
        self._validate_notify()
        size = len(json.dumps(self.payload).encode())
        _check(
            size <= MAX_PAYLOAD_BYTES,
            f"payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES} bytes",
        )

    def _validate_notify(self) -> None:
        if self.notify_url is not None:
            limit.url("--notify", self.notify_url)
            _check_url("--notify", self.notify_url)
        for event in self.notify_on or ():
            _check(
                event in NOTIFY_ON_CHOICES,
                f"--notify-on: unknown event '{event[:40]}'; the events are "
                + ", ".join(NOTIFY_ON_CHOICES),
            )
        _check(
            len(set(self.notify_on or ())) == len(self.notify_on or ()),
            "--notify-on: an event is given twice",
        )
        _check(
            not self.notify_headers or self.notify_url is not None,
            "--notify-header needs --notify (the fleet's notify-url gets its notify-headers)",
        )
        check_headers("--notify-header", self.notify_headers, setter="the deliverer")
        headers_size("--notify-header", self.notify_headers)
        self.check_deadline(self.history_retention)

    def check_deadline(self, retention: timedelta | None) -> None:
        """A deadline longer than the history retention (the task's, else the fleet's
        `retention`) could see its firing pruned before it passes."""
        if self.deadline is None:
            return
        kept = self.history_retention or retention
        _check(
            kept is None or self.deadline <= kept,
            f"--deadline {format_duration(self.deadline)} is longer than the history retention "
            f"({format_duration(kept) if kept else 'none'}): its firing could be pruned first",
        )


def header_pairs(label: str, given: Sequence[str]) -> tuple[tuple[str, str], ...] | None:
    """`--header 'Name: value'` options (`label`) as pairs, the name and value stripped; None
    when none was given, () for a lone `none`. What was given is not echoed: it may be a
    secret."""
    if not given:
        return None
    if [g.strip().lower() for g in given] == ["none"]:
        return ()
    pairs = []
    for text in given:
        name, colon, value = text.partition(":")
        if not colon or not name.strip():
            raise InvalidTask(f"{label} needs 'NAME: VALUE' (what was given is not shown)")
        pairs.append((name.strip(), value.strip()))
    return tuple(pairs)


def bound_headers(label: str, headers: Sequence[tuple[str, str]]) -> None:
    """Each header name and value storable (domain/limit.py `text`: no NUL, no surrogate)."""
    for name, value in headers:
        limit.text(f"{label} name", name)
        limit.text(f"{label} {name}", value)


def check_headers(label: str, headers: Sequence[tuple[str, str]], *, setter: str) -> None:
    """The rules HTTP headers a task sends obey (`--header` of an http task, `--notify-header`,
    `config set notify-headers`): an RFC 9110 token for a name, none that `setter` sets itself,
    no name twice (in any case), no line break or NUL in a value. Checked without echoing a
    value: it may be a secret."""
    seen: set[str] = set()
    for name, value in headers:
        _check(
            _HEADER_NAME.match(name) is not None,
            f"{label} name '{name[:80]}' is not a valid HTTP header name",
        )
        _check(name.lower() not in RESERVED_HEADERS, f"{label} {name} is set by {setter} itself")
        _check(name.lower() not in seen, f"{label} {name} is given twice")
        seen.add(name.lower())
        _check(
            not any(c in value for c in "\r\n\0"),
            f"{label} {name}: the value must not contain line breaks or NUL",
        )


def headers_size(label: str, headers: Sequence[tuple[str, str]]) -> None:
    """Headers kept apart from a payload (`--notify-header`, `config set notify-headers`) are
    held to the payload's bound, as JSON."""
    size = len(json.dumps(dict(headers)).encode())
    _check(
        size <= MAX_PAYLOAD_BYTES,
        f"{label}: the headers are {size} bytes; the limit is {MAX_PAYLOAD_BYTES} bytes",
    )


def _check_spread(spec: "TaskSpec", now: datetime) -> None:
    refusal = spread_refusal(spec.schedule(), spec.spread or timedelta(0), now)
    _check(refusal is None, refusal or "")


def _check_instant(at: datetime, now: datetime | None) -> None:
    """`--at` as an instant the daemons can add any bounded duration to: at most 100 years
    after the database's now (without it: before year 9999 less twice that)."""
    if at.tzinfo is None:
        return  # a local wall time: checked once read in its zone (TaskSpec.validate)
    try:
        utc = at.astimezone(UTC)
    except OverflowError:
        raise InvalidTask(f"--at {at.isoformat()} is out of range") from None
    last = (now + limit.MAX_DURATION) if now is not None else _LAST_INSTANT
    _check(utc <= last, f"--at {at.isoformat()} is too far ahead: at most 100 years after now")


_LAST_INSTANT = datetime.max.replace(tzinfo=UTC) - 2 * limit.MAX_DURATION


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise InvalidTask(message)


def _check_url(label: str, url: str) -> None:
    """An http(s) URL the daemon will parse (limit.http_url), as InvalidTask."""
    try:
        limit.http_url(label, url)
    except OutOfBounds as exc:
        raise InvalidTask(str(exc)) from None


def _check_choice(label: str, value: str, choices: type[StrEnum]) -> None:
    allowed = tuple(choices)  # `in` on the tuple: a non-member is refused, not a TypeError
    _check(value in allowed, f"unknown {label} '{value}': choose one of {', '.join(allowed)}")


@dataclass(frozen=True)
class TaskRecord:
    """A stored task: its definition plus the lifecycle and bookkeeping the database keeps."""

    id: int
    spec: TaskSpec
    status: str
    next_run_at: datetime | None
    occurrence_seq: int
    last_outcome_seq: int
    last_status: str | None
    last_scheduled_for: datetime | None
    last_finished_at: datetime | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None
    parked_at: datetime | None = None  # set when the dispatcher could not plan it
    park_error: str | None = None
    source: str | None = None  # the `tasks apply` source that defined it; None: made by hand
    paused_until: datetime | None = None  # a `--until` pause ends by itself then (0033)
    needs_build: str | None = None  # the revision a build needs to run it (ADR 0029)

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class TaskRef(FromRow):
    """A task a scan saw, by id: the fix locks it and reads it again."""

    id: int


@dataclass(frozen=True)
class DueLeft(FromRow):
    """What a dispatch left for the loop's pacing (`task_next_due_wake`): when the earliest task
    not yet due falls due (database clock; None: none), the tasks still due, which that
    dispatch could not lock (another session holds their rows), and whether a queued
    occurrence may start by now (`queue_due`: a poll claims only then)."""

    next_due: datetime | None
    locked: list[int]
    queue_due: bool
