"""Reads the per-task figures the metrics export, through the named queries in sql/task.sql, in
one round trip."""

from psycopg_pool import ConnectionPool

from scheduler_daemon.domain.task_figures import (
    FAILURES_CAP,
    OTHER_TASK,
    TaskFigures,
    lost_by_reason,
)
from scheduler_daemon.storage.database import Limits, one_trip

# A scrape waits for this sample: it gives up well before a scrape's own timeout (10 s).
SAMPLE_LIMITS = Limits(lock_timeout="1s", statement_timeout="5s")


def params(task_limit: int) -> dict[str, object]:
    """Both statements' parameters."""
    return {"task_limit": task_limit, "other": OTHER_TASK, "failures_cap": FAILURES_CAP}


def sample(
    pool: ConnectionPool, task_limit: int
) -> tuple[list[TaskFigures], dict[tuple[str, str], int]]:
    """The gauges per label value, and the lost firings by (task, reason); the first
    `task_limit` live tasks by id under their names, the rest under OTHER_TASK."""
    both = params(task_limit)
    _, figures, lost = one_trip(
        pool,
        ("session_jit_off", {}),
        ("task_metrics_sample", both),
        ("task_lost_firings", both),
        limits=SAMPLE_LIMITS,
    )
    return [TaskFigures.from_row(row) for row in figures], lost_by_reason(lost)
