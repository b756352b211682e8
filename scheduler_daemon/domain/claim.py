"""The rows of the hot path, typed: a claim (an occurrence this instance may launch) and a launch
(the run that claim became). Pure: both read from one row of the claim (`FromRow`, by name)."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from scheduler_daemon.domain.row import FromRow


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


@dataclass(frozen=True)
class Launched(FromRow):
    """The run one claim became (the claim's `id` is its occurrence, its `lease_token` the run's):
    its occurrence is running and counts this attempt."""

    run_id: int
    attempt: int
    started_at: datetime
    run_uuid: UUID
