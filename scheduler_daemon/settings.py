"""Where configuration comes from (flags, SCHEDULER_* variables, the embedded default), and the
daemon's per-replica settings with the timing invariants they must satisfy together."""

import os
import socket
from dataclasses import dataclass
from datetime import timedelta

from scheduler_daemon.domain import timing
from scheduler_daemon.domain.secret import url_passwords

DATABASE_URL_ENV = "SCHEDULER_DATABASE_URL"
# What a supervisor gives a process between SIGTERM and SIGKILL: Kubernetes'
# terminationGracePeriodSeconds defaults to 30 s, systemd's TimeoutStopSec to 90 s.
DEFAULT_STOP_TIMEOUT = timedelta(seconds=30)
SHUTDOWN_MARGIN = timedelta(seconds=5)
# The longest one loop pass blocks on the database while the daemon itself is healthy: a statement
# is cancelled by its statement_timeout (30 s, storage.database.Limits), and a connection whose
# peer vanished fails within TCP_USER_TIMEOUT (60 s, storage.database.KEEPALIVES); pool waits
# and connects give up after 5 s, inside those. An outage therefore ends passes (failed), it
# never stops them: only a wedged loop or a frozen process goes past this.
PASS_BLOCK_BOUND = timedelta(seconds=90)
# A longer window would delay every outcome and every refill by more than a start-lag budget.
MAX_BATCH_WINDOW = timedelta(milliseconds=100)
# Seven series a task: at 10,000 tasks a scrape is 5.6 MB and takes 0.9 s to format
# (bench/task_metrics.py); past it, a scrape would outgrow its interval.
MAX_METRICS_TASK_LIMIT = 10_000


class InvalidSettings(ValueError):
    """Settings that contradict each other; the message says which and how to fix it."""


@dataclass(frozen=True)
class DaemonSettings:
    """One replica's settings. Fleet-wide ones (the run budget) live in the database."""

    instance_prefix: str = socket.gethostname()
    concurrency: int = 4
    poll_interval: timedelta = timedelta(seconds=1)
    # Takeover after a crash within TTL + grace + reconcile interval = 15 s; a job rides out a
    # database outage of at least TTL - TTL/5 - TTL/3 = 4.2 s (docs/operations.md: the
    # "resilient" profile, 15s/5s/5s, rides out 7 s and takes over within 25 s).
    lease_ttl: timedelta = timedelta(seconds=9)
    lease_grace: timedelta = timedelta(seconds=3)
    drain_timeout: timedelta = timedelta(seconds=20)
    stop_timeout: timedelta = DEFAULT_STOP_TIMEOUT
    reconcile_interval: timedelta = timedelta(seconds=3)
    max_interruptions: int = 3
    instance_expiry: timedelta = timedelta(minutes=10)
    dispatch_batch: int = 100
    # After a job's end wakes the loop, how long it waits for this replica's other running jobs
    # to end too, so that one pass writes their outcomes and refills their slots together.
    batch_window: timedelta = timedelta(milliseconds=2)
    listen: bool = True
    http_host: str = "127.0.0.1"
    http_port: int = 0  # 0: no HTTP endpoint
    max_failed_passes: int = 10
    # The per-task gauges name the first this many live tasks by id; the rest share "_other".
    metrics_task_limit: int = 500
    # How long an in-process job asked to stop (timeout, cancel, fenced) may take to return
    # before the daemon stops claiming, drains and exits (a thread cannot be killed; ADR 0009).
    in_process_stop_grace: timedelta = timedelta(seconds=30)
    # A span per run over OTLP/HTTP, configured by the OTEL_* variables (the `otel` extra).
    otel: bool = False
    watchdog: timedelta | None = None  # systemd's WATCHDOG_USEC, when the unit sets one

    @property
    def renew_interval(self) -> timedelta:
        """Leases are renewed three times per TTL."""
        return timing.renew_interval(self.lease_ttl)

    def trust_deadline(self, sent: float) -> float:
        """The monotonic instant a job whose lease was set by a statement sent at `sent` is
        stopped at, unless a later renewal succeeds."""
        return timing.trust_deadline(sent, self.lease_ttl)

    @property
    def restart_quiet(self) -> timedelta:
        """After a database restart, how long nothing is taken over: cut-off owners reconnect,
        renew and write the outcomes they kept first."""
        return timing.restart_quiet(self.lease_ttl, self.lease_grace)

    @property
    def takeover_bound(self) -> timedelta:
        """The longest a dead replica's run waits for takeover."""
        return timing.takeover_bound(self.lease_ttl, self.lease_grace, self.reconcile_interval)

    @property
    def stall_timeout(self) -> timedelta:
        """No loop iteration completed for this long means the loop is stuck (/healthz 503):
        one poll interval of sleep plus the longest a healthy pass blocks on the database."""
        return self.poll_interval + PASS_BLOCK_BOUND

    def validate(self) -> "DaemonSettings":
        def check(ok: bool, message: str) -> None:
            if not ok:
                raise InvalidSettings(message)

        check(self.concurrency >= 1, "--concurrency must be at least 1")
        check(bool(self.instance_prefix.strip()), "--instance-id must not be empty")
        check(
            timedelta(0) < self.poll_interval <= timedelta(minutes=5),
            "--poll-interval must be between 0 and 5m",
        )
        check(
            self.lease_ttl >= timedelta(seconds=3),
            "--lease-ttl must be at least 3s (renewal runs every TTL/3)",
        )
        check(self.lease_grace > timedelta(0), "--lease-grace must be positive")
        check(
            self.reconcile_interval >= self.poll_interval,
            "--reconcile-interval must not be shorter than --poll-interval",
        )
        check(
            timedelta(0) <= self.batch_window <= MAX_BATCH_WINDOW,
            "--batch-window must be between 0 and 100ms",
        )
        check(self.drain_timeout >= timedelta(0), "--drain-timeout must not be negative")
        check(
            self.drain_timeout + SHUTDOWN_MARGIN <= self.stop_timeout,
            f"--drain-timeout {self.drain_timeout.total_seconds():g}s plus "
            f"{SHUTDOWN_MARGIN.total_seconds():g}s to record outcomes exceeds --stop-timeout "
            f"{self.stop_timeout.total_seconds():g}s (what systemd/Kubernetes allow before "
            "SIGKILL)",
        )
        check(self.max_interruptions >= 1, "--max-interruptions must be at least 1")
        check(
            self.instance_expiry > self.lease_ttl + self.lease_grace,
            "--instance-expiry must be longer than --lease-ttl plus --lease-grace",
        )
        check(0 <= self.http_port <= 65535, "--http-port must be between 0 (off) and 65535")
        check(bool(self.http_host.strip()), "--http-host must not be empty")
        check(
            0 <= self.metrics_task_limit <= MAX_METRICS_TASK_LIMIT,
            f"--metrics-task-limit must be between 0 (no per-task gauges) and "
            f"{MAX_METRICS_TASK_LIMIT:,}",
        )
        check(self.max_failed_passes >= 1, "--max-failed-passes must be at least 1")
        check(
            self.in_process_stop_grace > timedelta(0),
            "--in-process-stop-grace must be positive",
        )
        check(
            self.watchdog is None or self.watchdog > self.stall_timeout,
            f"the systemd watchdog ({_seconds(self.watchdog)}s, WatchdogSec=) must be longer "
            f"than --poll-interval + {_seconds(PASS_BLOCK_BOUND)}s "
            f"({_seconds(self.stall_timeout)}s), the longest a healthy loop iteration takes",
        )
        return self


def _seconds(value: timedelta | None) -> str:
    return "-" if value is None else f"{value.total_seconds():g}"


def resolve_database_url(url: str | None) -> str:
    """The configured URL (flag or SCHEDULER_DATABASE_URL), else the embedded server's. Its
    password, in every form, is masked in every log line and error from now on; a URL libpq
    cannot read is refused here, before anything could echo it."""
    url = url or os.environ.get(DATABASE_URL_ENV) or None
    if url:
        from scheduler_daemon import logconfig
        from scheduler_daemon.storage.database import UNPARSEABLE, describe_server

        logconfig.remember_secrets(url_passwords(url))
        if describe_server(url) == UNPARSEABLE:
            raise InvalidSettings(
                f"--database-url ({DATABASE_URL_ENV}): {UNPARSEABLE}: percent-encode any @, :, "
                "/, ?, # or space in the user name or password (%40, %3A, %2F, %3F, %23, %20)"
            )
        return url
    from scheduler_daemon import embedded

    embedded_url = embedded.acquire()  # logs one `embedded_database` line with the fleet hint
    embedded.install_signal_handlers()
    return embedded_url
