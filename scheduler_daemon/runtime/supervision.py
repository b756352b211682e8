"""Supervision of the daemon's loop and side threads (ADR 0005): counts the steps that keep
failing in a row, so that a daemon whose loop cannot work ends with a distinct exit code and its
supervisor (systemd `Restart=`, Kubernetes) restarts it, instead of logging the same error forever
(procrastinate's supervised side tasks are the model). The lease keeper is vital like the loop
(`Vital`: its thread dying, or failing `--max-failed-passes` passes in a row, ends the daemon with
EXIT_LEASE_KEEPER_FAILED); the waker, the HTTP endpoint and the pruner degrade (`Degradable`:
restarted with back-off, logged at most once a minute, counted).

A database outage never counts: during one the daemon keeps finished jobs' outcomes in memory and
writes them when the database is back, and a restart would lose them. Lock contention (a row or
the budget lock held past `lock_timeout`, a deadlock) does not count either: a restart cannot
free another session's lock. Everything else does: a broken or missing SQL object, a revoked
privilege, a bug. Each step (the pass, the reconciliation) is counted on its own, so a step that
runs rarely is not reset by the ones that run often.
"""

import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Literal

import structlog

from scheduler_daemon.lifecycle import Backoff
from scheduler_daemon.storage.database import first_line
from scheduler_daemon.storage.error import LOCK_ERRORS, DatabaseUnavailable

log = structlog.get_logger()
EXIT_FAILED_PASSES = 3
"""`run` exits with this after --max-failed-passes consecutive failed passes of one step."""
EXIT_LEASE_KEEPER_FAILED = 7
"""`run` exits with this when its lease keeper's thread died or failed --max-failed-passes
renewal passes in a row; it stopped its jobs first, without writing (their runs are taken over)."""
EXIT_IN_PROCESS_STUCK = 8
"""`run` exits with this when an in-process job did not return --in-process-stop-grace after it
was asked to stop; it stopped claiming and drained its other jobs first (ADR 0009)."""
EXIT_IN_PROCESS_UNTRUSTED = 9
"""`run` exits with this at once when an in-process job is still running at its trust deadline:
the only way to stop its thread before the run's takeover point (ADR 0009)."""
LOG_EVERY_SECONDS = 60.0
"""A degraded part's failures are logged at most this often (each one is counted)."""
BACKOFF_SECONDS = (1.0, 60.0)
"""A dead side thread is restarted after the first, doubling up to the second."""

Kind = Literal["outage", "contention", "failure"]


def classify(exc: BaseException) -> Kind:
    """What a step's error means for supervision."""
    if isinstance(exc, DatabaseUnavailable):
        return "outage"
    if isinstance(exc, LOCK_ERRORS):
        return "contention"
    return "failure"


@dataclass
class Supervisor:
    limit: int
    failures: dict[str, int] = field(default_factory=dict)  # step -> consecutive failures
    last_error: dict[str, str] = field(default_factory=dict)

    def succeeded(self, step: str) -> None:
        self.failures[step] = 0

    def failed(self, step: str, exc: BaseException, line: str) -> Kind:
        """Records a failed step; outages and contention neither count nor reset the count."""
        kind = classify(exc)
        if kind == "failure":
            self.failures[step] = self.failures.get(step, 0) + 1
            self.last_error[step] = line
        return kind

    @property
    def exhausted(self) -> str | None:
        """The first step that failed `limit` times in a row, if any."""
        return next((s for s, n in self.failures.items() if n >= self.limit), None)

    @property
    def consecutive(self) -> int:
        """The longest current run of failures over all steps (a gauge)."""
        return max(self.failures.values(), default=0)


class Vital:
    """A side thread the daemon cannot work without: the lease keeper. Fed from the keeper's own
    thread (`succeeded`, `failed`, `died`), read by the loop (`problem`). Outages (a lost
    connection, a server in recovery or read-only) and lock contention neither count nor reset
    the count: they are what the trust deadline is for, and a restart cannot end them."""

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self._lock = threading.Lock()
        self.failures = 0  # in a row
        self.last_error: str | None = None
        self._death: str | None = None

    def succeeded(self) -> None:
        with self._lock:
            self.failures = 0

    def failed(self, exc: BaseException) -> Kind:
        kind = classify(exc)
        if kind == "failure":
            with self._lock:
                self.failures += 1
                self.last_error = first_line(exc)
        return kind

    def died(self, exc: BaseException | None) -> None:
        with self._lock:
            self._death = "its thread ended" if exc is None else f"its thread died: {exc!r}"

    def problem(self, alive: bool = True) -> str | None:
        """Why the daemon must stop, or None. `alive` is whether the thread still runs."""
        with self._lock:
            if self._death is not None:
                return self._death
            if not alive:
                return "its thread ended"
            if self.failures >= self.limit:
                return f"failed {self.failures} passes in a row: {self.last_error}"
        return None


@dataclass(eq=False)
class Degradable:
    """A side part the daemon works without (the waker, the HTTP endpoint, the pruner): each
    failure is counted (`on_failure`) and logged at most once a minute with how many came since
    the last line; a dead thread is restarted by `check` (called from the loop) with back-off,
    which resets once a restarted thread stayed up LOG_EVERY_SECONDS."""

    part: str
    _: KW_ONLY
    on_failure: Callable[[], None]
    alive: Callable[[], bool] = lambda: True
    restart: Callable[[], None] = lambda: None
    clock: Callable[[], float] = time.monotonic
    instance_id: str | None = None
    last_error: str | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)  # from its thread
    _logged_at: float = field(default=float("-inf"), init=False)
    _unlogged: int = field(default=0, init=False)
    _backoff: Backoff = field(default_factory=lambda: Backoff(*BACKOFF_SECONDS), init=False)
    _retry_at: float | None = field(default=None, init=False)  # set while the thread is dead
    _restarted_at: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.log = log.bind(part=self.part, instance_id=self.instance_id)

    def failed(self, exc: BaseException, event: str = "side_part_failed") -> None:
        """Counts one failure; logs it unless a line was logged within LOG_EVERY_SECONDS."""
        self.on_failure()
        with self._lock:
            self.last_error = first_line(exc)
            self._unlogged += 1
            now = self.clock()
            if now - self._logged_at < LOG_EVERY_SECONDS:
                return
            count, self._unlogged, self._logged_at = self._unlogged, 0, now
        self.log.warning(event, error=self.last_error, failures=count)

    def check(self) -> None:
        """From the loop: notices a dead thread (a failure) and starts it again once its
        back-off has passed; the back-off doubles at each restart, up to a minute."""
        now = self.clock()
        if self.alive():
            if self._restarted_at is not None and now - self._restarted_at >= LOG_EVERY_SECONDS:
                self._restarted_at = None
                self._backoff.reset()
            return
        if self._retry_at is None:  # found dead
            self.failed(RuntimeError(f"the {self.part} thread died"), "side_thread_died")
            self._retry_at = now + self._backoff.next()
            return
        if now < self._retry_at:
            return
        try:
            self.restart()
        except Exception as exc:
            self.failed(exc, "side_thread_restart_failed")
            self._retry_at = now + self._backoff.next()
            return
        self._retry_at, self._restarted_at = None, now
        self.log.info("side_thread_restarted", next_backoff_seconds=self._backoff.current)

    def degraded(self) -> str | None:
        """One line while the part's thread is down, else None."""
        if self.alive():
            return None
        return f"{self.part} down ({self.last_error}), restarting with back-off"


@dataclass
class SideThreads:
    """The daemon's side threads as its loop sees them: the vital lease keeper, and the parts
    that degrade, by name (`waker`, `endpoint`, `pruner`)."""

    keeper: Vital
    keeper_alive: Callable[[], bool]
    parts: dict[str, Degradable] = field(default_factory=dict)

    def keeper_problem(self) -> str | None:
        return self.keeper.problem(self.keeper_alive())

    def check(self) -> None:
        for part in self.parts.values():
            part.check()

    def degraded(self) -> str | None:
        """What is down, for /readyz's answer (which stays 200: ADR 0005); None when all work."""
        lines = [line for part in self.parts.values() if (line := part.degraded()) is not None]
        return "; ".join(lines) or None
