"""The timing facts derived from the lease settings, each written once (pure): how often a lease
is renewed, when a job whose renewals fail is stopped (its trust deadline), how long after a
database restart nothing is taken over, how long a dead owner's run waits for its takeover, and
how far this host's clock is from the database's.

`DaemonSettings` gives them for this replica, `view` for any instance from its row; the defaults
quoted in the docs are checked against them by tests/deploy/test_docs.py. The reasoning is in
docs/explanation/how-it-works.md.
"""

from datetime import datetime, timedelta

RENEWALS_PER_TTL = 3
TRUST_MARGIN_PER_TTL = 5  # the trust deadline falls TTL/5 before the lease ends


def renew_interval(lease_ttl: timedelta) -> timedelta:
    """How often the lease keeper renews: three times per TTL."""
    return lease_ttl / RENEWALS_PER_TTL


FOLLOWS_PER_WINDOW = 3  # a follower's mark counts for three renewal intervals of the owner


def follow_window(lease_ttl: timedelta) -> timedelta:
    """How long a follower's mark (`run.followed_at`, set by `runs logs -f` every second or so)
    keeps the owner writing the run's output with its renewals: three renewal intervals (one
    TTL), so a follower's short pause or one skipped renewal does not stop the writes."""
    return renew_interval(lease_ttl) * FOLLOWS_PER_WINDOW


RENEWALS_OVERDUE = 2  # an owner two renewals late has stopped renewing; one is a hiccup


def renewal_overdue_per_ttl() -> float:
    """How long without a renewal, in TTLs of the owner, means it stopped renewing: two
    renewal intervals (2 * TTL/3)."""
    return RENEWALS_OVERDUE / RENEWALS_PER_TTL


def trust_margin(lease_ttl: timedelta) -> timedelta:
    """How long before a lease's end its job is stopped when renewals fail."""
    return lease_ttl / TRUST_MARGIN_PER_TTL


def trust_deadline(sent: float, lease_ttl: timedelta) -> float:
    """The `time.monotonic()` instant a job is stopped at unless a later renewal succeeds, for a
    lease set by a statement sent at monotonic time `sent`: sent + TTL - TTL/5. The database set
    the lease end no earlier than the send plus TTL, so the job is gone before the lease ends."""
    return sent + (lease_ttl - trust_margin(lease_ttl)).total_seconds()


RENEWAL_LOCK_WAIT_PER_TTL = 10  # a renewal pass waits TTL/10 for held rows, TTL/5 at most


def renewal_lock_wait(lease_ttl: timedelta) -> timedelta:
    """How long one renewal pass waits for rows another session holds: TTL/10 for its
    heartbeat's instance row, and TTL/10 in all for the run rows it could not lock at once
    (tried again one by one). A pass so lasts under TTL/5 more than its statements, and the
    next one is sent within TTL/3 + TTL/5 of it: before any trust deadline (TTL - TTL/5), and
    before its owner counts as no longer renewing (2 * TTL/3)."""
    return lease_ttl / RENEWAL_LOCK_WAIT_PER_TTL


def restart_quiet(lease_ttl: timedelta, lease_grace: timedelta) -> timedelta:
    """After a database restart, how long nothing is taken over: cut-off owners reconnect, renew
    and write the outcomes they kept first."""
    return lease_ttl + lease_grace


def takeover_bound(
    lease_ttl: timedelta, lease_grace: timedelta, reconcile_interval: timedelta
) -> timedelta:
    """The longest a dead replica's run waits for takeover: its takeover point (lease end plus
    grace) plus one reconcile interval of the peer that takes it over."""
    return lease_ttl + lease_grace + reconcile_interval


def clock_drift(db_now: datetime, sent: float, received: float) -> timedelta:
    """Database clock minus this host's: `db_now` as read by a statement sent at `sent` and
    answered at `received` (both `time.time()`), taken as read at the midpoint. Reported, never
    used to coordinate."""
    return timedelta(seconds=db_now.timestamp() - (sent + received) / 2)
