"""Supervision of the daemon's loop: counts the steps that keep failing in a row, so that a daemon
whose loop cannot work ends with a distinct exit code and its supervisor (systemd `Restart=`,
Kubernetes) restarts it, instead of logging the same error forever (procrastinate's supervised
side tasks are the model).

A database outage never counts: during one the daemon keeps finished jobs' outcomes in memory and
writes them when the database is back, and a restart would lose them. Lock contention (a row or
the budget lock held past `lock_timeout`, a deadlock) does not count either: a restart cannot
free another session's lock. Everything else does: a broken or missing SQL object, a revoked
privilege, a bug. Each step (the pass, the reconciliation) is counted on its own, so a step that
runs rarely is not reset by the ones that run often.
"""

from dataclasses import dataclass, field
from typing import Literal

from scheduler_daemon.storage.error import LOCK_ERRORS, DatabaseUnavailable

EXIT_FAILED_PASSES = 3
"""`run` exits with this after --max-failed-passes consecutive failed passes of one step."""

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
