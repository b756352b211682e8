"""What the executor tests share: a job context, and waiting for a job's outcome on the wake
event (set when any job finishes) instead of sleeping."""

import threading
import time
from datetime import UTC, datetime

from scheduler_daemon.executors.base import JobContext, Outcome

SCHEDULED_FOR = datetime(2024, 5, 1, 12, 30, tzinfo=UTC)
KILL_MARGIN = 0.3  # a deadline kill must land within this much after the deadline


def context(
    run_id: int = 11, timeout: float | None = None, deadline_in: float = 30.0
) -> JobContext:
    return JobContext(
        task_id=3,
        task_name="nightly-report",
        occurrence_id=7,
        run_id=run_id,
        scheduled_for=SCHEDULED_FOR,
        attempt=2,
        lease_token=5,
        idempotency_key="occ-7-key",
        timeout=timeout,
        deadline=time.monotonic() + deadline_in,
        run_uuid="0b7e4a52-6c1d-4c9e-9a53-2f1d8e0c7a11",
    )


# The run identifiers of `context(run_id=42)` as a job is given them in JSON (a python job's
# ctx, an http job's body).
IDENTIFIERS_42 = {
    "task_id": 3,
    "task_name": "nightly-report",
    "occurrence_id": 7,
    "run_id": 42,
    "scheduled_for": "2024-05-01T12:30:00+00:00",
    "attempt": 2,
    "lease_token": 5,
    "idempotency_key": "occ-7-key",
    "run_uuid": "0b7e4a52-6c1d-4c9e-9a53-2f1d8e0c7a11",
}


def wait_outcome(job: object, wake: threading.Event, within: float = 10.0) -> Outcome:
    """Waits on the wake event until `job` has an outcome; fails the test after `within`."""
    limit = time.monotonic() + within
    while (outcome := job.poll()) is None:  # type: ignore[attr-defined]
        remaining = limit - time.monotonic()
        assert remaining > 0, "job did not finish in time"
        wake.wait(remaining)
        wake.clear()
    return outcome
