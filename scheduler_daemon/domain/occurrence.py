"""The occurrence as the stores return it: one firing (or manual trigger) of a task."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduler_daemon.domain.row import FromRow
from scheduler_daemon.domain.status import OccurrenceStatus


@dataclass(frozen=True)
class Occurrence(FromRow):
    """An `occurrence` row (sql/schema.sql), with its task's name where the query joins it."""

    id: int
    task_id: int
    occurrence_seq: int
    scheduled_for: datetime
    last_scheduled_for: datetime | None
    firing_count: int
    trigger: str
    overlap: str
    concurrency_key: str | None
    status: OccurrenceStatus
    reason: str | None
    requested_by: str | None
    attempts: int
    interruptions: int
    lease_token: int
    claim_owner: str | None
    claim_expires_at: datetime | None
    not_before: datetime
    error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    cancel_reason: str | None
    task_name: str | None = None  # joined from the task by the queries that read it
    args: dict[str, Any] | None = None  # a manual trigger's arguments (revision 0034)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", OccurrenceStatus(self.status))


@dataclass(frozen=True)
class OccurrenceRef(FromRow):
    """An occurrence a reconciler scan saw: enough to lock its task, then it."""

    id: int
    task_id: int


@dataclass(frozen=True)
class ExpiredClaim(OccurrenceRef):
    """A claim past its expiry, with the token the requeue compares and sets on."""

    lease_token: int
