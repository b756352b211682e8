"""A run as the stores return it: one attempt at executing an occurrence, under a lease."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

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


@dataclass(frozen=True)
class HistoryRow(FromRow):
    """The run row of docs/cli.md (`runs list`, and each run of `runs show --occurrence`): one
    run attempt, or an occurrence that never ran (then `id`, `attempt`, `started_at` and
    `lease_token` are None, `status` is the occurrence's and `instance_id` its claim owner).
    The fields are the columns of sql/run.sql's run_history, in order."""

    id: int | None
    occurrence_id: int
    occurrence_seq: int
    task_id: int
    task_name: str
    scheduled_for: datetime
    trigger: str
    attempt: int | None
    status: str
    reason: str | None
    instance_id: str | None
    started_at: datetime | None
    finished_at: datetime | None
    exit_code: int | None
    http_status: int | None
    error: str | None
    firing_count: int
    last_scheduled_for: datetime | None
    lease_token: int | None
    cancel_requested_at: datetime | None  # only on a running run whose occurrence has one
    args: dict[str, Any] | None  # its occurrence's trigger arguments (revision 0034)


@dataclass(frozen=True)
class RunDetail(HistoryRow):
    """`runs show`: the run row of one run, then its lease columns and output tail (run_get)."""

    id: int
    occurrence_status: str
    lease_expires_at: datetime
    takeover_at: datetime
    finished_by: str | None
    output_tail: str | None
    # When its occurrence may start next, and the delay its latest retry drew (issue 37 item 2:
    # with --backoff-max each retry draws its own); null where an older build requeued it.
    occurrence_not_before: datetime
    occurrence_retry_delay_seconds: float | None


@dataclass(frozen=True)
class RunOutput(FromRow):
    """`runs logs`: one run's status, owner, result and output tail (run_output, run_follow)."""

    id: int
    status: str
    owner: str
    output_tail: str | None
    exit_code: int | None
    http_status: int | None
    error: str | None
