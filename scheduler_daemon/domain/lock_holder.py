"""Who holds the fleet budget's advisory lock, as the stores return it, and which holders are not
a daemon's claim (pure).

Every role can take a transaction-scoped advisory lock: no privilege guards it. A session that
holds the budget's key stops every claim of the fleet, and the claims only see their own wait
end (`lock_timeout`). A daemon's claim holds the lock for the server's work alone, within one
round trip (milliseconds); a transaction seen holding it at two reads a moment apart is not one.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler_daemon.domain.row import FromRow

CONFIRM_AFTER_SECONDS = 1.0
"""How far apart the two reads are that tell a long holder from a daemon's claim (`status`)."""

REPORT_EVERY_SECONDS = 60.0
"""A daemon whose claims stay blocked logs `budget_lock_held` at most this often."""


@dataclass(frozen=True)
class LockHolder(FromRow):
    """One session (or prepared transaction) holding the budget's lock, read from pg_locks joined
    to pg_stat_activity. `pid`, `role` and `application_name` are visible to every role; the
    other columns of another role's session only to a member of pg_read_all_stats (else None).
    A prepared transaction has no pid: `prepared` names its gid, and `role` is its owner."""

    pid: int | None
    virtualtransaction: str  # the holding transaction: the same at two reads means one holder
    role: str | None
    application_name: str | None
    state: str | None  # `idle in transaction`: a session that forgot to end it
    transaction_started_at: datetime | None
    in_transaction: timedelta | None  # since its transaction began, on the database clock
    prepared: str | None = None

    @property
    def key(self) -> tuple[int | None, str]:
        return self.pid, self.virtualtransaction


def held_throughout(first: list[LockHolder], second: list[LockHolder]) -> list[LockHolder]:
    """The holders of the second read whose transaction held the lock at the first read too (a
    moment apart): longer than any daemon's claim holds it."""
    before = {holder.key for holder in first}
    return [holder for holder in second if holder.key in before]


def holder_fields(holder: LockHolder | None) -> dict[str, object]:
    """A holder as the fields of the `budget_lock_held` log line (all None: none was found)."""
    seconds = None
    if holder is not None and holder.in_transaction is not None:
        seconds = round(holder.in_transaction.total_seconds(), 3)
    return {
        "holder_pid": holder and holder.pid,
        "holder_role": holder and holder.role,
        "holder_application_name": holder and holder.application_name,
        "holder_state": holder and holder.state,
        "holder_in_transaction_seconds": seconds,
        "holder_prepared": holder and holder.prepared,
    }
