"""The rows of the hot path, typed: a claim (an occurrence this instance may launch) and a launch
(the run that claim became). Pure: both read from one row of the claim (`FromRow`, by name),
its JSON decoded here, row by row, within a bound (`claimed`)."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from scheduler_daemon.domain.json_text import MAX_DEPTH, UndecodableJson, loads_bounded
from scheduler_daemon.domain.row import FromRow

PAYLOAD_MAX_DEPTH = 64
"""The deepest task payload the daemon decodes. What the CLI, the Client and `tasks apply` write
nests 2 levels (`{"url": ..., "headers": {...}}`); the bound is generous past that, and far
below the ~1,000 levels where the standard decoder raises RecursionError. A payload written
deeper by SQL is its run's error (`unreadable`)."""


@dataclass(frozen=True)
class Claim(FromRow):
    """One occurrence claimed by this instance (its token raised), with what its job needs from
    the task."""

    id: int
    task_id: int
    scheduled_for: datetime
    lease_token: int  # the occurrence's and its run's
    task_name: str
    executor: str
    payload: dict[str, Any]
    run_timeout: timedelta | None
    idempotency_key: str  # stored on the occurrence at its creation (the legacy one if none)
    in_process: bool  # run by the in-process executor, not `executor`'s (task.in_process)
    spread_start: datetime  # its scheduled time plus its spread offset: what start lag counts from
    args: dict[str, Any] | None = None  # its trigger's arguments, the same on every attempt
    # Why its payload or arguments could not be read (one line); None: read. Such a claim's run
    # fails with it, its job never started (services.launcher).
    unreadable: str | None = None


@dataclass(frozen=True)
class Launched(FromRow):
    """The run one claim became (the claim's `id` is its occurrence, its `lease_token` the run's):
    its occurrence is running and counts this attempt."""

    run_id: int
    attempt: int
    started_at: datetime
    run_uuid: UUID


def claimed(row: Mapping[str, Any]) -> tuple[Claim, Launched]:
    """One launched row of the claim, its payload and arguments given as JSON text, each
    decoded on its own within its bound: a text that cannot be read makes the claim
    `unreadable` (payload {} and no arguments), never an exception, so the other rows of the
    batch launch."""
    values = dict(row)
    try:
        values["payload"] = loads_bounded(row["payload"], PAYLOAD_MAX_DEPTH)
    except UndecodableJson as exc:
        values.update(payload={}, args=None, unreadable=f"payload unreadable: {exc}")
        return Claim.from_row(values), Launched.from_row(values)
    try:
        values["args"] = None if row["args"] is None else loads_bounded(row["args"], MAX_DEPTH)
    except UndecodableJson as exc:
        values.update(args=None, unreadable=f"arguments unreadable: {exc}")
    return Claim.from_row(values), Launched.from_row(values)
