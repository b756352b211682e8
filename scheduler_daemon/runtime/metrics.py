"""The daemon's Prometheus metrics: one registry per daemon, filled by the daemon from what the
services' `run_once` results report (services never import this module).

Labels are bounded: `status` (run statuses, dispatch statuses), `executor` (shell, http, python),
`stage` (completion, renewal), `kind` (of database error), `step`, `part` (waker, endpoint,
pruner); the per-task gauges (`task_metrics.TaskGauges`) carry `task`, a name among at most
--metrics-task-limit (the rest share one value), and `reason` (domain.status.LostReason).
Occurrence and run ids never become labels. The instance id is a label of
`scheduler_daemon_info` only: the scrape adds its own `instance` label (host:port) to every
series, and a per-start id on each series would start a new series at every restart.

Per-replica figures (counters, histograms, `slots_in_use`) add up across the fleet: `sum`.
Fleet-wide figures (`scheduler_daemon_queue_depth`, `scheduler_daemon_executing_runs`,
`scheduler_daemon_max_concurrent_runs`) are read from the database and are the same on every
replica: aggregate them with `max` (not `sum`, which multiplies them by the replica count), e.g.
`max(scheduler_daemon_queue_depth)`. They are sampled every --reconcile-interval and keep their
last value while the database is unreachable (`scheduler_daemon_fleet_sample_age_seconds` says
how old it is).
"""

import time
from collections import defaultdict
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from scheduler_daemon.domain.status import OccurrenceStatus
from scheduler_daemon.runtime.task_metrics import TaskGauges
from scheduler_daemon.services.completer import CompleteResult
from scheduler_daemon.services.dispatcher import DispatchResult
from scheduler_daemon.services.launcher import LaunchResult
from scheduler_daemon.services.reconciler import ReconcileReport

NAMESPACE = "scheduler_daemon"
# No `*_created` series: a timestamp per counter that doubles the exposition and that no
# dashboard of ours reads (process_start_time_seconds says when the daemon started).
disable_created_metrics()
# Start lag and run duration: from milliseconds to a day.
SECONDS_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 1800, 3600, 21600)
# The parts that degrade (ADR 0005).
SIDE_PARTS = ("waker", "endpoint", "pruner", "partitions", "deliverer")
LOOP_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 90)


class Metrics:
    """Every metric of one daemon, on its own registry (several daemons can share a process)."""

    def __init__(self, instance_id: str, version: str, concurrency: int) -> None:
        self.registry = r = CollectorRegistry()
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        ns: dict[str, Any] = {"namespace": NAMESPACE, "registry": r}
        Info(NAMESPACE, "This daemon process.", registry=r).info(
            {"instance_id": instance_id, "version": version}
        )
        self._runs(ns)
        self._loop(ns, concurrency)
        self._fleet(ns)
        self._partitions(ns)
        self.tasks = TaskGauges()  # served empty until the daemon attaches its sample
        r.register(self.tasks)
        for stage in ("completion", "renewal"):  # every series exists from the start
            self.fenced.labels(stage)
        for kind in ("unavailable", "contention", "other"):
            self.database_errors.labels(kind)
        for part in SIDE_PARTS:
            self.side_failures.labels(part)

    def _runs(self, ns: dict[str, Any]) -> None:
        """What happens to occurrences and runs on this replica."""
        self.dispatched = Counter(
            "occurrences_dispatched",
            "Occurrences this replica's dispatcher created, by status (queued, skipped).",
            ["status"],
            **ns,
        )
        self.claimed = Counter("occurrences_claimed", "Occurrences claimed for launch.", **ns)
        self.started = Counter("runs_started", "Runs launched.", ["executor"], **ns)
        self.not_started = Counter(
            "runs_not_started",
            "Claimed runs whose job was refused at its start because their trust deadline had "
            "passed (the daemon froze after its claim): recorded interrupted, requeued.",
            **ns,
        )
        self.finished = Counter(
            "runs_finished", "Run outcomes written, by run status.", ["status", "executor"], **ns
        )
        self.start_lag = Histogram(
            "run_start_lag_seconds",
            "Run start minus the occurrence's scheduled time plus its spread offset (database "
            "clock), first attempts only (a retry's lag includes its backoff).",
            ["executor"],
            buckets=SECONDS_BUCKETS,
            **ns,
        )
        self.duration = Histogram(
            "run_duration_seconds",
            "Job start to outcome, on this host's monotonic clock.",
            ["status", "executor"],
            buckets=SECONDS_BUCKETS,
            **ns,
        )
        self.renewals = Counter(
            "lease_renewals", "Lease renewal passes (renewal and heartbeat) that succeeded.", **ns
        )
        self.renewal_failures = Counter(
            "lease_renewal_failures", "Lease renewal passes that failed.", **ns
        )
        self.takeovers = Counter(
            "takeovers", "Runs of silent owners this replica's reconciler took over.", **ns
        )
        self.fenced = Counter(
            "fenced_writes",
            "Writes refused because the lease token moved on, by stage (completion, renewal): "
            "expected after a takeover or a cancel.",
            ["stage"],
            **ns,
        )

    def _loop(self, ns: dict[str, Any], concurrency: int) -> None:
        """The loop's health and this replica's slots."""
        self.database_errors = Counter(
            "database_errors",
            "Failed loop steps and renewals, by kind: unavailable (an outage), contention "
            "(lock or statement timeout, deadlock), other (counted by --max-failed-passes).",
            ["kind"],
            **ns,
        )
        self.failed_passes = Gauge(
            "consecutive_failed_passes",
            "Current run of failed passes (of a loop step or the lease keeper) that count "
            "toward --max-failed-passes.",
            **ns,
        )
        self.side_failures = Counter(
            "side_failures",
            "Failures of a part the daemon works without, by part: waker (a LISTEN session "
            "or its thread), endpoint (its thread), pruner (a pass), partitions (a partition "
            "upkeep that failed or gave up, ADR 0033), deliverer (a pass of the notification "
            "outbox, or its thread).",
            ["part"],
            **ns,
        )
        self.notification_failures = Counter(
            "notification_failures",
            "Notification POSTs that failed (an answer other than 2xx, a timeout, a "
            "connection error); each is tried again with back-off (ADR 0016).",
            **ns,
        )
        self.iteration = Histogram(
            "loop_iteration_seconds",
            "One loop iteration: reconciliation when due, completion, dispatch, launch; "
            "without the sleep.",
            buckets=LOOP_BUCKETS,
            **ns,
        )
        self.slots_in_use = Gauge("slots_in_use", "Runs this replica holds.", **ns)
        Gauge("concurrency", "This replica's job slots (--concurrency).", **ns).set(concurrency)

    def _partitions(self, ns: dict[str, Any]) -> None:
        self.partitions_ahead = Gauge(
            "history_partitions_ahead",
            "Dated history partitions not yet past, the one being written included, as this "
            "daemon's last partition upkeep found them (ADR 0033); below 2 is warned; -1 before "
            "any answer or when history is not partitioned.",
            **ns,
        )
        self.partitions_ahead.set(-1)

    def _fleet(self, ns: dict[str, Any]) -> None:
        """Fleet-wide figures read from the database; the drain; this replica's wait for the
        budget's lock."""
        self.queue_depth = Gauge(
            "queue_depth", "Queued occurrences, fleet-wide: aggregate with max.", **ns
        )
        self.executing = Gauge(
            "executing_runs",
            "Occurrences holding a slot of the fleet budget, fleet-wide: aggregate with max.",
            **ns,
        )
        self.budget = Gauge(
            "max_concurrent_runs",
            "The fleet budget (config max-concurrent-runs), fleet-wide: aggregate with max.",
            **ns,
        )
        self._sampled_at: float | None = None
        Gauge(
            "fleet_sample_age_seconds",
            "Seconds since the fleet-wide gauges were last read from the database.",
            **ns,
        ).set_function(self._sample_age)
        self.draining = Gauge("draining", "1 while the daemon drains.", **ns)
        self.budget_blocked = Gauge(
            "budget_lock_blocked_seconds",
            "How long this replica's claims have been failing to take the fleet budget's lock "
            "(someone holds it: its log names the holder, `status` too); 0 once one takes it.",
            **ns,
        )
        self.claims = Counter(
            "claims",
            "Claims sent, each under the fleet budget's lock; over runs_started, the claim "
            "attempts per started job.",
            **ns,
        )
        self.budget_lock_timeouts = Counter(
            "budget_lock_timeouts",
            "Claims that gave up waiting for the fleet budget's lock (lock_timeout).",
            **ns,
        )
        self.epochs_seen = Counter(
            "database_epochs_seen",
            "Database epochs (system identifier, timeline) whose first sighting in the fleet "
            "this replica recorded: a promotion adds one across the fleet (aggregate with sum).",
            **ns,
        )
        self.timeline = Gauge(
            "database_timeline",
            "The timeline of the server this replica's latest new connection reached.",
            **ns,
        )
        self.epoch_older = Counter(
            "database_epoch_older",
            "New connections refused because their server is on an older timeline than one "
            "already seen (a former primary still taking writes: fence it).",
            **ns,
        )

    def _sample_age(self) -> float:
        return float("nan") if self._sampled_at is None else time.monotonic() - self._sampled_at

    # -- recording what the services report ------------------------------------------------------
    def record_dispatch(self, result: DispatchResult) -> None:
        self.dispatched.labels(OccurrenceStatus.QUEUED).inc(result.queued)
        self.dispatched.labels(OccurrenceStatus.SKIPPED).inc(result.skipped)

    def record_launch(self, result: LaunchResult) -> None:
        """Per batch: one labelled child per executor, not a look-up per run (a look-up takes a
        lock and a dict walk: 4 of them a job cost about 40 us of the daemon's CPU)."""
        self.claimed.inc(result.claimed)
        if result.not_started:
            self.not_started.inc(result.not_started)
        if result.budget_blocked_seconds is not None:  # a claim was sent
            self.claims.inc()
            self.budget_blocked.set(result.budget_blocked_seconds)
            if result.budget_lock_timeout:
                self.budget_lock_timeouts.inc()
        by_executor = defaultdict(list)
        for run in result.started:
            by_executor[run.executor].append(run)
        for executor, runs in by_executor.items():
            self.started.labels(executor).inc(len(runs))
            lag = self.start_lag.labels(executor)
            for run in runs:
                if run.attempt == 1:
                    lag.observe(max(0.0, run.start_lag_seconds))

    def record_completion(self, result: CompleteResult) -> None:
        self.fenced.labels("completion").inc(result.fenced)
        by_labels = defaultdict(list)
        for run in result.finished:
            by_labels[run.status, run.executor].append(run.duration_seconds)
        for labels, durations in by_labels.items():
            self.finished.labels(*labels).inc(len(durations))
            duration = self.duration.labels(*labels)
            for seconds in durations:
                duration.observe(seconds)

    def record_reconcile(self, report: ReconcileReport) -> None:
        self.takeovers.inc(report.counts["taken_over"])

    def record_renewal(self, fenced: set[int] | None) -> None:
        if fenced is None:
            self.renewal_failures.inc()
            return
        self.renewals.inc()
        self.fenced.labels("renewal").inc(len(fenced))

    def record_fleet(self, queue_depth: int, executing: int, budget: int) -> None:
        self.queue_depth.set(queue_depth)
        self.executing.set(executing)
        self.budget.set(budget)
        self._sampled_at = time.monotonic()
