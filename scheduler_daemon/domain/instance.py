"""A registered daemon instance as the stores return it (one row per process start)."""

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler_daemon.domain.row import FromRow


@dataclass(frozen=True)
class Instance(FromRow):
    """An `instance` row (sql/schema.sql); `silent_for` (database clock) where listed."""

    id: str
    hostname: str
    pid: int
    version: str
    schema_revision: str
    concurrency: int
    slots_in_use: int
    lease_ttl: timedelta
    lease_grace: timedelta
    reconcile_interval: timedelta
    clock_drift: timedelta | None
    stopping: bool
    started_at: datetime
    heartbeat_at: datetime
    silent_for: timedelta | None = None  # how long ago it was heard from, in `instance_list`
    compatible: bool | None = None  # `Client.status`: can its build write to the schema as it is


def new_instance_id(prefix: str) -> str:
    """Unique per process start, so a restarted process is a new instance."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
