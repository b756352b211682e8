"""A run as the stores return it: one attempt at executing an occurrence, under a lease."""

from dataclasses import dataclass
from datetime import datetime

from scheduler_daemon.domain.row import FromRow


@dataclass(frozen=True)
class Run(FromRow):
    """A `run` row (sql/schema.sql)."""

    id: int
    occurrence_id: int
    attempt: int
    owner: str
    lease_token: int
    lease_expires_at: datetime
    takeover_at: datetime
    status: str
    exit_code: int | None
    http_status: int | None
    output_tail: str | None
    error: str | None
    finished_by: str | None
    started_at: datetime
    finished_at: datetime | None
    build_revision: str | None = None  # NULL on a run a build before revision 0004 started


@dataclass(frozen=True)
class TakeoverCandidate(FromRow):
    """A running run past its takeover point, as the reconciler's scan saw it."""

    id: int
    occurrence_id: int
    task_id: int
    lease_token: int
    owner: str
