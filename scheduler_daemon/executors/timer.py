"""One job's timers: its trust deadline, its timeout and a stop's SIGTERM→SIGKILL grace (pure).

`JobTimers` decides when a job must be killed and why; the caller passes `time.monotonic()` in and
does the killing (the shell watchdog, the python executor's monitor thread, the http executor's
timekeeper). No I/O, no clock, no locks: each caller holds its own. Standard library and the outcome
vocabulary (domain.status, an enum) only, because the watchdog imports it.

The rules, earliest first when several are due at once:
- the trust deadline passing kills at once, even during a stop's grace, and keeps the reason of a
  stop already under way (else `stopped`, DEADLINE_ERROR);
- a stop's grace passing kills with the stop's reason;
- the timeout passing kills with `timeout`, unless a stop came first.
"""

from collections.abc import Iterable
from typing import NamedTuple

from scheduler_daemon.domain.status import OutcomeStatus

STOP_GRACE_SECONDS = 1.0
"""After stop(): SIGTERM (or the cancelled event), then SIGKILL once this much time has passed."""

DEADLINE_ERROR = "killed: trust deadline passed"


def timeout_error(seconds: float) -> str:
    """The Outcome error of a job whose own timeout passed."""
    return f"timed out after {seconds:g} s"


class Stop(NamedTuple):
    """Why a job is being stopped: the Outcome status (`stopped` or `timeout`) and error."""

    status: OutcomeStatus
    error: str


class JobTimers:
    """The timers of one job, started at monotonic time `now`."""

    def __init__(
        self,
        now: float,
        *,
        deadline: float,
        timeout: float | None,
        grace: float = STOP_GRACE_SECONDS,
    ) -> None:
        self.deadline = deadline  # absolute monotonic time; extend() moves it
        self.timeout = timeout  # seconds, None = no timeout
        self.timeout_at = None if timeout is None else now + timeout
        self.grace = grace
        self.kill_at: float | None = None  # the end of a stop's grace
        self.reason: Stop | None = None  # set by stop() or by the kill fire() decides
        self.killed = False  # fire() decided the kill; nothing is due any more

    def extend(self, deadline: float) -> None:
        """Move the trust deadline (a lease renewal)."""
        self.deadline = deadline

    def stop(self, now: float, error: str = "") -> bool:
        """Begin a graceful stop: the kill follows `grace` seconds from `now` unless the job ends
        first. False if a stop or kill was already decided (then nothing changes)."""
        if self.reason is not None:
            return False
        self.reason = Stop(OutcomeStatus.STOPPED, error)
        self.kill_at = now + self.grace
        return True

    def fire(self, now: float) -> Stop | None:
        """The kill due at `now`, once: its reason, which `reason` keeps; None if none is due."""
        if self.killed:
            return None
        if now >= self.deadline:
            reason = self.reason or Stop(OutcomeStatus.STOPPED, DEADLINE_ERROR)
        elif self.kill_at is not None and now >= self.kill_at:
            reason = self.reason or Stop(OutcomeStatus.STOPPED, "")
        elif self.reason is None and self.timeout_at is not None and now >= self.timeout_at:
            assert self.timeout is not None
            reason = Stop(OutcomeStatus.TIMEOUT, timeout_error(self.timeout))
        else:
            return None
        self.reason = reason
        self.killed = True
        return reason

    def wake_at(self) -> float | None:
        """When fire() may next have something to do: the earliest pending deadline."""
        if self.killed:
            return None
        pending = [self.deadline]
        if self.kill_at is not None:
            pending.append(self.kill_at)
        if self.reason is None and self.timeout_at is not None:
            pending.append(self.timeout_at)
        return min(pending)


def next_wake(timers: Iterable[JobTimers]) -> float | None:
    """The earliest wake_at() of several jobs; None when none has a timer pending."""
    pending = [at for at in (t.wake_at() for t in timers) if at is not None]
    return min(pending) if pending else None


class CooperativeTimers:
    """The timers of one in-process job, started at monotonic time `now`: a thread cannot be
    killed, so where JobTimers decides a kill this decides a request and what follows it.
    `fire(now)` returns each event once, earliest rule first:
    - "untrusted": the trust deadline passed while the job runs (the daemon must exit at once);
    - "stop": the timeout passed (ask the job to stop; `reason` says `timeout`);
    - "stuck": `grace` seconds passed since the job was asked to stop (by `stop()` or its
      timeout) and it is still running (the daemon stops claiming and exits)."""

    def __init__(self, now: float, *, deadline: float, timeout: float | None, grace: float) -> None:
        self.deadline = deadline
        self.timeout = timeout
        self.timeout_at = None if timeout is None else now + timeout
        self.grace = grace
        self.asked_at: float | None = None  # when the job was asked to stop
        self.reason: Stop | None = None
        self.untrusted = False
        self.stuck = False

    def extend(self, deadline: float) -> None:
        """Move the trust deadline (a lease renewal); never back."""
        self.deadline = max(self.deadline, deadline)

    def stop(self, now: float, error: str = "") -> bool:
        """The job is asked to stop at `now`; False if it already was (nothing changes)."""
        if self.reason is not None:
            return False
        self.reason, self.asked_at = Stop(OutcomeStatus.STOPPED, error), now
        return True

    def fire(self, now: float) -> str | None:
        """The next event due at `now`, once; None when none is."""
        if not self.untrusted and now >= self.deadline:
            self.untrusted = True
            return "untrusted"
        if self.reason is None and self.timeout_at is not None and now >= self.timeout_at:
            assert self.timeout is not None
            self.reason = Stop(OutcomeStatus.TIMEOUT, timeout_error(self.timeout))
            self.asked_at = now
            return "stop"
        if self.asked_at is not None and not self.stuck and now >= self.asked_at + self.grace:
            self.stuck = True
            return "stuck"
        return None

    def wake_at(self) -> float | None:
        """When fire() may next have something to do."""
        pending = [] if self.untrusted else [self.deadline]
        if self.reason is None and self.timeout_at is not None:
            pending.append(self.timeout_at)
        if self.asked_at is not None and not self.stuck:
            pending.append(self.asked_at + self.grace)
        return min(pending) if pending else None
