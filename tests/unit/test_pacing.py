"""The loop's pacing stepped with a fake clock, no database and no waiting (db-scheduler's
ManualScheduler steps its loop the same way): when it reconciles, dispatches, claims, sleeps and
gathers."""

from datetime import UTC, datetime, timedelta

import pytest

from scheduler_daemon.runtime.pacing import LockedSpells, Pacing
from scheduler_daemon.settings import DaemonSettings

DB_NOW = datetime(2030, 1, 1, tzinfo=UTC)


class FakeClock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def pacing(clock: FakeClock, batch_window: float = 0.002) -> Pacing:
    """A 5 s poll, a 10 s reconcile interval."""
    return Pacing(poll=5.0, reconcile_interval=10.0, batch_window=batch_window, clock=clock)


def test_a_fresh_pacing_reconciles_dispatches_and_claims_at_once() -> None:
    clock = FakeClock()
    p = pacing(clock)
    assert p.reconcile_due(clock())
    assert p.dispatch_due()
    assert p.launch_due()
    assert p.sleep_seconds() == 0.0


def test_the_next_reconciliation_is_an_interval_after_the_last_one_ended() -> None:
    clock = FakeClock()
    p = pacing(clock)
    clock.advance(3.0)  # the reconciliation itself took 3 s
    p.reconciled()
    clock.advance(9.9)
    assert not p.reconcile_due(clock())
    clock.advance(0.1)
    assert p.reconcile_due(clock())


def test_a_dispatch_that_sees_nothing_due_waits_one_poll_from_when_it_began() -> None:
    clock = FakeClock()
    p = pacing(clock)
    began = p.dispatch_began()
    clock.advance(1.0)  # the dispatch's own length does not delay the next one
    p.dispatched(began, None, None)
    assert p.next_dispatch == began + 5.0
    assert p.sleep_seconds() == pytest.approx(4.0)


def test_a_task_due_sooner_than_a_poll_is_dispatched_at_its_due_time() -> None:
    clock = FakeClock()
    p = pacing(clock)
    began = p.dispatch_began()
    clock.advance(0.5)
    p.dispatched(began, DB_NOW + timedelta(seconds=2), DB_NOW)
    assert p.next_dispatch == began + 2.0
    clock.advance(1.4)
    assert not p.dispatch_due()
    clock.advance(0.1)
    assert p.dispatch_due()


def test_a_due_time_further_than_a_poll_still_waits_one_poll_at_most() -> None:
    clock = FakeClock()
    p = pacing(clock)
    began = p.dispatch_began()
    p.dispatched(began, DB_NOW + timedelta(hours=1), DB_NOW)
    assert p.next_dispatch == began + 5.0


def test_a_task_it_could_not_lock_is_backed_off_until_the_next_poll() -> None:
    # Would catch 518d2f3, which tried again 20 ms later, every 20 ms for as long as another
    # session held the row (issue 31: 95 transactions/s against 5 idle), and a version that
    # dispatched again at once.
    clock = FakeClock()
    p = pacing(clock)
    began = p.dispatch_began()
    clock.advance(0.3)
    assert p.dispatched(began, None, DB_NOW, locked=[7]) == LockedSpells()
    assert p.next_dispatch == began + 5.0
    clock.advance(4.6)
    assert not p.dispatch_due()
    clock.advance(0.1)
    assert p.dispatch_due()


def test_a_due_time_already_past_is_a_task_it_could_not_take_and_waits_a_poll() -> None:
    clock = FakeClock()
    p = pacing(clock)
    began = p.dispatch_began()
    p.dispatched(began, DB_NOW, DB_NOW)
    assert p.next_dispatch == began + 5.0


def test_a_task_due_sooner_is_dispatched_on_time_beside_one_it_could_not_lock() -> None:
    # The locked task holds back only itself: the next due time is the earliest of the others.
    clock = FakeClock()
    p = pacing(clock)
    began = p.dispatch_began()
    p.dispatched(began, DB_NOW + timedelta(seconds=2), DB_NOW, locked=[7])
    assert p.next_dispatch == began + 2.0


def _locked_at_each_dispatch(p: Pacing, clock: FakeClock, *locked: list[int]) -> list[LockedSpells]:
    """Dispatches once a poll, finding `locked[i]` locked at the i-th; what each one returns."""
    spells = []
    for ids in locked:
        clock.now = max(clock.now, p.next_dispatch)
        spells.append(p.dispatched(p.dispatch_began(), None, DB_NOW, locked=ids))
        clock.advance(0.01)  # the dispatch's own length
    return spells


def test_a_task_still_locked_a_poll_later_is_reported_once_and_its_end_once() -> None:
    # Would catch a version that logged every pass (one line a poll for as long as it is held).
    clock = FakeClock()
    p = pacing(clock)
    first, second, third, fourth = _locked_at_each_dispatch(p, clock, [7], [7], [7], [])
    assert first == LockedSpells()  # found locked once: a peer may be dispatching it
    assert second.held == ((7, pytest.approx(5.0)),)
    assert third == LockedSpells()  # the same spell
    assert fourth == LockedSpells(released=((7, pytest.approx(15.0)),))


def test_a_row_a_peer_held_for_one_dispatch_is_never_reported() -> None:
    clock = FakeClock()
    p = pacing(clock)
    spells = _locked_at_each_dispatch(p, clock, [7], [], [8], [])
    assert spells == [LockedSpells()] * 4


def test_a_dispatch_sooner_than_a_poll_does_not_report_a_locked_task_yet() -> None:
    # A due hint or another task's due time brings a dispatch in: it finds the row still locked,
    # but less than a poll after the first, when a peer's dispatch may still hold it.
    clock = FakeClock()
    p = pacing(clock)
    p.dispatched(p.dispatch_began(), None, DB_NOW, locked=[7])
    clock.advance(2.0)
    assert p.dispatched(p.dispatch_began(), None, DB_NOW, locked=[7]) == LockedSpells()
    clock.now = p.next_dispatch  # that one's poll: 7 s after the first
    assert p.dispatched(p.dispatch_began(), None, DB_NOW, locked=[7]).held == ((7, 7.0),)


def test_a_spell_that_ended_and_begins_again_is_reported_again() -> None:
    clock = FakeClock()
    p = pacing(clock)
    spells = _locked_at_each_dispatch(p, clock, [7, 8], [7, 8], [8], [7, 8], [7, 8])
    assert [[task for task, _ in s.held] for s in spells] == [[], [7, 8], [], [], [7]]
    assert [[task for task, _ in s.released] for s in spells] == [[], [], [7], [], []]


def test_a_failed_dispatch_is_tried_again_a_poll_later() -> None:
    clock = FakeClock()
    p = pacing(clock)
    began = p.dispatch_began()  # then the dispatch raises: `dispatched` is never called
    assert p.next_dispatch == began + 5.0


def test_a_new_task_pulls_the_next_dispatch_in_once_the_loop_takes_its_hint() -> None:
    clock = FakeClock()
    wall = FakeClock(DB_NOW.timestamp())
    p = Pacing(poll=5.0, reconcile_interval=10.0, batch_window=0.0, clock=clock, wall=wall)
    p.dispatched(p.dispatch_began(), None, None)
    p.task_added(DB_NOW + timedelta(seconds=2))
    assert p.next_dispatch == clock() + 5.0  # a hint only, until the loop takes it
    p.take_due_hints()
    assert p.next_dispatch == pytest.approx(clock() + 2.0)
    p.take_due_hints()  # taken once
    assert p.next_dispatch == pytest.approx(clock() + 2.0)


def test_a_new_tasks_due_time_is_placed_through_the_measured_clock_drift() -> None:
    # The database clock runs 3 s ahead of this host's: a task due in 2 s on the database
    # clock is due now on this host's - 1 s, i.e. at once.
    clock = FakeClock()
    wall = FakeClock(DB_NOW.timestamp() - 3.0)
    p = Pacing(
        poll=5.0,
        reconcile_interval=10.0,
        batch_window=0.0,
        clock=clock,
        wall=wall,
        drift=lambda: timedelta(seconds=3),
    )
    p.dispatched(p.dispatch_began(), None, None)
    p.task_added(DB_NOW + timedelta(seconds=2))
    p.take_due_hints()
    assert p.next_dispatch == pytest.approx(clock() + 2.0)


def test_a_new_task_without_a_due_time_is_dispatched_at_once() -> None:
    clock = FakeClock()
    p = pacing(clock)
    p.dispatched(p.dispatch_began(), None, None)
    p.task_added(None)
    p.take_due_hints()
    assert p.dispatch_due()
    assert p.sleep_seconds() == 0.0


def test_claims_are_tried_when_wanted_and_never_on_a_poll_alone() -> None:
    """An idle loop claims nothing (issue 33 item 3: on a poll alone 50 idle daemons sent 49
    claims/s, each under the budget's lock); a dispatch that found a queued occurrence that
    may start wants the claim a retry's ended backoff needs (runtime/loop.py)."""
    clock = FakeClock()
    p = pacing(clock)
    p.launching()
    assert not p.launch_due()
    p.want_launch()  # a wake-up that queued work, or freed slots
    assert p.launch_due()
    p.launching()
    clock.advance(60.0)  # a minute of polls with nothing queued
    assert not p.launch_due()
    p.want_launch()  # a dispatch saw `queue_due`
    assert p.launch_due()


def test_gathering_waits_while_one_job_ended_and_others_run_within_the_window() -> None:
    clock = FakeClock()
    p = pacing(clock, batch_window=0.002)
    until = p.gather_until()
    assert until == clock() + 0.002
    assert p.gather_left(until, ended=True, running=True) == pytest.approx(0.002)
    clock.advance(0.001)
    assert p.gather_left(until, ended=True, running=True) == pytest.approx(0.001)
    clock.advance(0.001)
    assert p.gather_left(until, ended=True, running=True) is None  # the window passed


@pytest.mark.parametrize(("ended", "running"), [(False, True), (True, False), (False, False)])
def test_gathering_stops_when_nothing_ended_or_nothing_else_runs(
    ended: bool, running: bool
) -> None:
    clock = FakeClock()
    p = pacing(clock)
    until = p.gather_until()
    assert until is not None
    assert p.gather_left(until, ended=ended, running=running) is None


def test_no_batch_window_means_no_gathering() -> None:
    assert pacing(FakeClock(), batch_window=0.0).gather_until() is None


def test_pacing_from_settings_reads_the_poll_reconcile_and_batch_intervals() -> None:
    settings = DaemonSettings(
        poll_interval=timedelta(seconds=2),
        reconcile_interval=timedelta(seconds=7),
        batch_window=timedelta(milliseconds=3),
    )
    p = Pacing.from_settings(settings, clock=FakeClock())
    assert (p.poll, p.reconcile_interval, p.batch_window) == (2.0, 7.0, 0.003)


def test_a_spread_start_this_daemon_queued_wakes_it_and_makes_it_claim_then() -> None:
    # --spread (issue 37 item 1): the occurrences a dispatch queued with a start 2 s and 3.5 s
    # ahead are claimed at those starts, counted from when the dispatch committed; nothing else
    # would wake the loop (no NOTIFY at a not_before), so without this it would claim only at
    # its next poll, 5 s later.
    clock = FakeClock()
    p = pacing(clock)
    p.launching()  # the pass's own claim was sent
    began = p.dispatch_began()
    p.dispatched(began, DB_NOW + timedelta(hours=1), DB_NOW)
    clock.advance(0.25)  # the dispatch's commit
    p.spread([DB_NOW + timedelta(seconds=3.5), DB_NOW + timedelta(seconds=2)], DB_NOW)
    assert not p.launch_due()
    assert p.sleep_seconds() == pytest.approx(2.0)
    clock.advance(2.0)
    assert p.launch_due()
    p.launching()
    assert not p.launch_due()
    assert p.sleep_seconds() == pytest.approx(1.5)
    clock.advance(1.5)
    assert p.launch_due()
    p.launching()
    assert p.sleep_seconds() == pytest.approx(5.0 - 3.75)  # the next poll's dispatch
