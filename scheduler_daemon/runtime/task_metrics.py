"""The per-task gauges every replica serves (ADR 0013): read from the database on a scrape's own
thread at most once per TASK_SAMPLE_SECONDS, the last sample served between scrapes and while the
database cannot answer, so N scrapers cost one sample per interval per replica.

Every replica serves the same values, read from one database: aggregate them with `max by
(task)`. The `task` label is a task's name for the first --metrics-task-limit live tasks by id
(a stable set: a new task never pushes an older one out); the rest share `task="_other"`, whose
running and lost firings are sums and whose consecutive failures the largest, with no times.
"""

import threading
import time
from collections.abc import Callable, Iterator

import structlog
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scheduler_daemon.domain.task_figures import FAILURES_CAP, TaskFigures

log = structlog.get_logger()
TASK_SAMPLE_SECONDS = 15.0
PREFIX = "scheduler_daemon_task_"
Sample = tuple[list[TaskFigures], dict[tuple[str, str], int]]
TIMES = {  # metric suffix: (TaskFigures field, help)
    "last_success_timestamp_seconds": (
        "last_success",
        "When the task's newest successful occurrence finished (database clock).",
    ),
    "last_schedule_timestamp_seconds": (
        "last_schedule",
        "The task's newest scheduled firing recorded, whatever its fate.",
    ),
    "next_schedule_timestamp_seconds": (
        "next_schedule",
        "When the task fires next; absent while paused, parked or finished.",
    ),
}


class TaskGauges(Collector):
    """A prometheus_client collector over a `sample` function; without one (no endpoint, no
    pool yet, --metrics-task-limit 0) it serves the families empty."""

    def __init__(
        self,
        sample: Callable[[], Sample] | None = None,
        *,
        interval: float = TASK_SAMPLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sample = sample
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        # The last sample and when it was read, replaced whole by one store: a scrape on the
        # other handler thread reads either the old one or the new one, never half of each.
        self._last: tuple[list[TaskFigures], dict[tuple[str, str], int], float | None] = (
            [],
            {},
            None,
        )
        self._tried_at: float | None = None

    def attach(self, sample: Callable[[], Sample] | None) -> None:
        """Reads with `sample` from now on; None: reads no more, serves the last sample."""
        self._sample = sample

    def refresh(self) -> None:
        """Reads a sample now; raises what the read raised, keeping the last one."""
        assert self._sample is not None
        figures, lost = self._sample()
        self._last = (figures, lost, self._clock())

    def _refresh_when_due(self) -> None:
        """One scrape reads; one that comes meanwhile serves the last sample at once rather than
        wait, so a slow database holds at most one of the endpoint's two handler threads and
        /readyz keeps answering on the other."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            now = self._clock()
            if self._sample is None or (
                self._tried_at is not None and now - self._tried_at < self._interval
            ):
                return
            self._tried_at = now
            try:
                self.refresh()
            except Exception as exc:  # an outage, a timeout: the last sample is served
                log.warning("task_sample_failed", error=repr(exc))
        finally:
            self._lock.release()

    def collect(self) -> Iterator[Metric]:
        self._refresh_when_due()
        figures, lost, sampled_at = self._last
        for suffix, (field, text) in TIMES.items():
            family = GaugeMetricFamily(PREFIX + suffix, text, labels=["task"])
            for row in figures:
                value = getattr(row, field)
                if value is not None:
                    family.add_metric([row.task], value)
            yield family
        running = GaugeMetricFamily(
            PREFIX + "running", "The task's occurrences claimed or running.", labels=["task"]
        )
        failures = GaugeMetricFamily(
            PREFIX + "consecutive_failures",
            "The task's failed outcomes (failed, timeout, interrupted) since its last success, "
            f"counted up to {FAILURES_CAP}.",
            labels=["task"],
        )
        for row in figures:
            running.add_metric([row.task], row.running)
            failures.add_metric([row.task], row.failures)
        yield running
        yield failures
        family = GaugeMetricFamily(
            PREFIX + "lost_firings",
            "The task's firings recorded skipped or expired, by reason, in the history kept "
            "(pruning lowers it: alert on its delta).",
            labels=["task", "reason"],
        )
        for (task, reason), count in sorted(lost.items()):
            family.add_metric([task, reason], count)
        yield family
        age = float("nan") if sampled_at is None else self._clock() - sampled_at
        yield GaugeMetricFamily(
            PREFIX + "sample_age_seconds",
            "Seconds since the per-task gauges were read from the database.",
            value=age,
        )
