"""The loop's pacing: when it next reconciles, dispatches and claims, how long it sleeps, and how
long it gathers the ends of jobs into one pass. Pure timing on a clock it is given (a callable
returning monotonic seconds), so tests step it with a fake clock, without a database or a wait
(tests/unit/test_pacing.py), as db-scheduler's ManualScheduler steps its loop.

Times here are this host's monotonic seconds and only ever durations: a due time read on the
database clock becomes one through the clock drift the daemon measured (docs/explanation)."""

import heapq
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler_daemon.settings import DaemonSettings

Clock = Callable[[], float]


@dataclass(frozen=True)
class LockedSpells:
    """What the tasks a dispatch could not lock mean for the log, each as (task id, seconds since
    a dispatch first found it locked): `held`, spells to report now (once each: the task is
    still locked a poll after), and `released`, reported spells whose task is no longer left
    due and locked."""

    held: tuple[tuple[int, float], ...] = ()
    released: tuple[tuple[int, float], ...] = ()


class Pacing:
    """The loop's timetable. `next_dispatch` and `next_reconcile` are monotonic deadlines (0.0:
    at once). `launch_wanted` says whether claiming may find something: set by wake-ups that
    queue work or free budget, by a dispatch that queued or saw a queued occurrence that may
    start; cleared by a claim that saw the end of the queue. Due hints come from the waker's
    thread, all else from the loop's."""

    def __init__(
        self,
        *,
        poll: float,
        reconcile_interval: float,
        batch_window: float,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
        drift: Callable[[], timedelta | None] = lambda: None,
    ) -> None:
        self.poll = poll
        self.reconcile_interval = reconcile_interval
        self.batch_window = batch_window
        self.clock = clock
        self.wall = wall  # this host's wall clock, only to place a database due time
        self.drift = drift  # database clock minus this host's, as last measured
        # When the loop dispatches next: the earliest due time, at most a poll away. A new
        # task's due time arrives with its wake-up (`task_added`); a task added without one is
        # dispatched at once.
        self.next_dispatch = 0.0
        self.next_reconcile = 0.0
        self.launch_wanted = threading.Event()
        self.launch_wanted.set()
        self._due_hints: list[float] = []
        self._hints_lock = threading.Lock()
        # Tasks the last dispatch found due and locked: when a dispatch first found each one
        # locked, and whether its spell was reported.
        self._locked: dict[int, tuple[float, bool]] = {}
        # When occurrences this daemon queued with a spread start ahead may start (monotonic, a
        # heap): nothing else wakes the loop then.
        self._spread_starts: list[float] = []

    @classmethod
    def from_settings(
        cls,
        settings: DaemonSettings,
        *,
        clock: Clock = time.monotonic,
        drift: Callable[[], timedelta | None] = lambda: None,
    ) -> "Pacing":
        return cls(
            poll=settings.poll_interval.total_seconds(),
            reconcile_interval=settings.reconcile_interval.total_seconds(),
            batch_window=settings.batch_window.total_seconds(),
            clock=clock,
            drift=drift,
        )

    # -- reconcile -------------------------------------------------------------------------------
    def reconcile_due(self, now: float) -> bool:
        return now >= self.next_reconcile

    def reconciled(self) -> None:
        """The next reconciliation is an interval after this one ended."""
        self.next_reconcile = self.clock() + self.reconcile_interval

    # -- dispatch --------------------------------------------------------------------------------
    def dispatch_due(self) -> bool:
        return self.clock() >= self.next_dispatch

    def dispatch_began(self) -> float:
        """A dispatch begins: the next one is a poll away even if this one fails."""
        began = self.clock()
        self.next_dispatch = began + self.poll
        return began

    def dispatched(
        self,
        began: float,
        next_due: datetime | None,
        db_now: datetime | None,
        locked: Collection[int] = (),
    ) -> LockedSpells:
        """Sets the next dispatch after one that began at `began` and read `next_due` (the
        earliest next_run_at of the tasks not yet due) at `db_now`, both on the database clock:
        the due time counted from the moment the dispatch began (so neither the pass's own
        length nor the clock drift delays it), at most one poll interval away. A task the
        dispatch found due but could not lock (`locked`: another session holds its row) is
        backed off until that next poll: its due time is past, and dispatching again at once
        would only skip it again, a transaction each time, for as long as the row is held. A
        peer that holds it to dispatch it commits within milliseconds; so a task found locked
        again at a dispatch a poll or more after the first that found it is held by something
        else, and its spell is returned in `held`, once."""
        if next_due is None or db_now is None or next_due <= db_now:
            # Nothing ahead, or a due time already past: a task left due is one this dispatch
            # could not lock, tried again at the next poll and not before.
            self.next_dispatch = began + self.poll
        else:
            self.next_dispatch = began + min(self.poll, (next_due - db_now).total_seconds())
        return self._locked_spells(began, locked)

    def _locked_spells(self, began: float, locked: Collection[int]) -> LockedSpells:
        """Carries each task's locked spell from dispatch to dispatch (see `dispatched`)."""
        now, spells, held = self.clock(), {}, []
        for task_id in locked:
            since, reported = self._locked.get(task_id, (began, False))
            if not reported and began >= since + self.poll:  # as `next_dispatch` was computed
                held.append((task_id, now - since))
                reported = True
            spells[task_id] = (since, reported)
        released = [
            (task_id, now - since)
            for task_id, (since, reported) in self._locked.items()
            if reported and task_id not in spells
        ]
        self._locked = spells
        return LockedSpells(tuple(held), tuple(released))

    def task_added(self, due: datetime | None) -> None:
        """The waker heard of a new task (on its own thread): its due time (database clock)
        becomes a monotonic deadline through the measured drift; without one, dispatch at once.
        Kept as a hint until the loop takes it (`take_due_hints`)."""
        if due is None:
            at = self.clock()
        else:
            drift = self.drift()
            offset = drift.total_seconds() if drift else 0.0
            at = self.clock() + due.timestamp() - (self.wall() + offset)
        with self._hints_lock:
            self._due_hints.append(at)

    def take_due_hints(self) -> None:
        with self._hints_lock:
            hints, self._due_hints = self._due_hints, []
        if hints:
            self.next_dispatch = min(self.next_dispatch, *hints)

    # -- launch ----------------------------------------------------------------------------------
    def want_launch(self) -> None:
        self.launch_wanted.set()

    def spread(self, starts: Collection[datetime], db_now: datetime | None) -> None:
        """A dispatch that read `db_now` queued occurrences whose spread starts (`starts`,
        database clock) are still ahead: the loop claims at each, counted from now, after the
        dispatch committed, so never before the database's clock reaches it (a claim sent early
        would find it not yet startable, and it would wait for a poll). Only the dispatching
        daemon knows them this early; a peer finds such an occurrence at its next dispatch
        (`queue_due`)."""
        if db_now is None:
            return
        now = self.clock()
        for start in starts:
            heapq.heappush(self._spread_starts, now + (start - db_now).total_seconds())

    def launch_due(self) -> bool:
        """Claim when something may be claimable: a wake-up said so, a dispatch queued work or
        found a queued occurrence that may start (it runs at least once a poll interval: a
        retry's backoff ends without a wake-up), a spread start this daemon queued came, or a
        pass failed. Never on a poll alone: in an idle fleet every daemon's claim would take the
        budget's lock once a poll for nothing (issue 33 item 3: 50 daemons sent 49 claims/s,
        each serialized on that lock)."""
        now = self.clock()
        while self._spread_starts and self._spread_starts[0] <= now:
            heapq.heappop(self._spread_starts)
            self.launch_wanted.set()
        return self.launch_wanted.is_set()

    def launching(self) -> None:
        self.launch_wanted.clear()

    # -- sleep and gather ------------------------------------------------------------------------
    def sleep_seconds(self) -> float:
        """How long the loop may sleep before the next dispatch, or spread start, is due."""
        wake = min([self.next_dispatch, *self._spread_starts[:1]])
        return max(0.0, wake - self.clock())

    def gather_until(self) -> float | None:
        """The end of the --batch-window that begins now; None when there is no window."""
        if self.batch_window <= 0:
            return None
        return self.clock() + self.batch_window

    def gather_left(self, until: float, *, ended: bool, running: bool) -> float | None:
        """How much longer to wait for more ends (None: stop gathering): only while a job has
        ended and others still run, and the window has not passed."""
        left = until - self.clock()
        if not ended or not running or left <= 0:
            return None
        return left
