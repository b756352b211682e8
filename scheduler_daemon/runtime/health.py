"""What /healthz and /readyz answer: liveness from the loop's progress alone, readiness from the
database, the schema and the drain.

Liveness never asks the database. During an outage the loop keeps iterating (each pass fails
within `settings.PASS_BLOCK_BOUND`) and the daemon keeps finished jobs' outcomes in memory; a
liveness probe that failed then would have the daemon restarted and the outcomes lost. It fails
only when no loop iteration completed within `DaemonSettings.stall_timeout` (the poll interval
plus `PASS_BLOCK_BOUND`, 90 s): a wedged loop or a process that was frozen.
"""

import threading
import time
from collections.abc import Callable

from scheduler_daemon.settings import PASS_BLOCK_BOUND


class LoopProgress:
    """When the loop last completed an iteration (or a retry while waiting for the database, or
    a step of the drain), on the monotonic clock."""

    def __init__(self, stall_timeout: float, *, clock: Callable[[], float] = time.monotonic):
        self.stall_timeout = stall_timeout
        self._clock = clock
        self._last = clock()
        self.on_progress: list[Callable[[], None]] = []

    def tick(self) -> None:
        self._last = self._clock()
        for callback in self.on_progress:
            callback()

    def since(self) -> float:
        return self._clock() - self._last

    def problem(self) -> str | None:
        """None while the loop makes progress, else one line saying how long it has not."""
        idle = self.since()
        if idle <= self.stall_timeout:
            return None
        return (
            f"stuck: no loop iteration completed for {idle:.0f}s "
            f"(bound {self.stall_timeout:g}s: poll interval + "
            f"{PASS_BLOCK_BOUND.total_seconds():g}s pass bound)"
        )


class Readiness:
    """Ready when registered, not draining, and the database answers with this build's schema.
    The database check runs on the probe's thread, at most once per `ttl` seconds (a burst of
    probes shares one answer) and never on the loop's connections."""

    def __init__(
        self,
        check_database: Callable[[], str | None],
        *,
        ttl: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.check_database = check_database  # None when fine, else the reason
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self._database: str | None = None
        self.state: str | None = "starting: waiting for the database"  # None once registered

    def problem(self) -> str | None:
        if self.state is not None:
            return self.state
        with self._lock:
            if self._clock() - self._checked_at >= self.ttl:
                try:
                    self._database = self.check_database()
                except Exception as exc:  # the probe must answer, whatever the check met
                    self._database = f"database check failed: {type(exc).__name__}"
                self._checked_at = self._clock()
            return self._database
