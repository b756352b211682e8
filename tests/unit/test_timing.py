"""The lease arithmetic, written once in domain/timing.py: what the launcher, the lease keeper,
the daemon, `status` and `cancel` compute from it."""

from datetime import UTC, datetime, timedelta

from scheduler_daemon.domain import timing
from scheduler_daemon.settings import DaemonSettings

TTL = timedelta(seconds=15)


def test_a_job_is_trusted_until_ttl_minus_a_fifth_after_the_statement_was_sent() -> None:
    assert timing.trust_deadline(100.0, TTL) == 112.0
    # Before the lease the database set (no earlier than the send plus TTL) ends.
    assert timing.trust_deadline(100.0, TTL) < 100.0 + TTL.total_seconds()


def test_renewals_come_three_times_per_ttl_and_the_margin_is_a_fifth() -> None:
    assert timing.renew_interval(TTL) == timedelta(seconds=5)
    assert timing.trust_margin(TTL) == timedelta(seconds=3)


def test_a_pass_waiting_its_longest_for_held_rows_still_renews_before_any_trust_deadline() -> None:
    # The heartbeat's wait and the held runs' retries, TTL/10 each: the next renewal of every
    # other run is sent within one interval plus both waits, before a job is stopped and before
    # a peer counts the owner as no longer renewing (issue 31).
    wait = timing.renewal_lock_wait(TTL)
    assert wait == timedelta(seconds=1.5)
    worst = timing.renew_interval(TTL) + 2 * wait
    assert worst < TTL - timing.trust_margin(TTL)
    assert worst < TTL * timing.renewal_overdue_per_ttl()


def test_the_takeover_bound_is_the_quiet_period_plus_one_reconcile_interval() -> None:
    grace, reconcile = timedelta(seconds=5), timedelta(seconds=7)
    assert timing.restart_quiet(TTL, grace) == timedelta(seconds=20)
    assert timing.takeover_bound(TTL, grace, reconcile) == timedelta(seconds=27)


def test_clock_drift_reads_the_database_clock_at_the_midpoint_of_the_round_trip() -> None:
    db_now = datetime.fromtimestamp(1_000.5, UTC)
    assert timing.clock_drift(db_now, sent=990.0, received=992.0) == timedelta(seconds=9.5)
    assert timing.clock_drift(db_now, sent=1_000.0, received=1_001.0) == timedelta(0)


def test_the_settings_give_this_replicas_values_from_the_same_functions() -> None:
    s = DaemonSettings(lease_ttl=timedelta(seconds=9), lease_grace=timedelta(seconds=2))
    assert s.renew_interval == timing.renew_interval(s.lease_ttl)
    assert s.trust_deadline(50.0) == timing.trust_deadline(50.0, s.lease_ttl)
    assert s.restart_quiet == timing.restart_quiet(s.lease_ttl, s.lease_grace)
    assert s.takeover_bound == timing.takeover_bound(
        s.lease_ttl, s.lease_grace, s.reconcile_interval
    )
