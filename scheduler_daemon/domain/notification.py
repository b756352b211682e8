"""Notifications (pure): the row a deliverer claimed, the body it POSTs, and the backoff after a
failed POST."""

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from scheduler_daemon.domain.status import LostReason

BACKOFF_FIRST = timedelta(seconds=1)
BACKOFF_CAP = timedelta(minutes=5)
# The reasons of the past-due firings an operator's command records skipped (pause, unpark,
# reschedule, delete: `control.owed_firings`): the deadline scan judges those firings, where
# the dispatcher judged the ones it recorded late itself (ADR 0016).
OPERATOR_REASONS = [
    LostReason.PAUSED.value,
    LostReason.PARKED.value,
    LostReason.RESCHEDULED.value,
    LostReason.DELETED.value,
]


@dataclass(frozen=True)
class Notification:
    """One claimed outbox row: `attempts` counts this POST, and is the token its record is
    fenced on."""

    id: int
    delivery_id: str
    occurrence_id: int | None  # None: a `deadline` of a firing not recorded when it was written
    task_id: int
    event: str
    payload: dict[str, Any]
    attempts: int
    url: str | None
    headers: dict[str, str]

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "Notification":
        return cls(
            id=row["id"],
            delivery_id=str(row["delivery_id"]),
            occurrence_id=row["occurrence_id"],
            task_id=row["task_id"],
            event=row["event"],
            payload=dict(row["payload"]),
            attempts=row["attempts"],
            url=row["url"],
            headers={str(k): str(v) for k, v in (row["headers"] or {}).items()},
        )

    def body(self) -> dict[str, Any]:
        """The JSON every POST of this row sends: its payload and its `delivery_id`."""
        return {**self.payload, "delivery_id": self.delivery_id}


def backoff(
    attempts: int, first: timedelta = BACKOFF_FIRST, cap: timedelta = BACKOFF_CAP
) -> timedelta:
    """The wait after the `attempts`-th failed POST: `first`, doubling, at most `cap`."""
    if attempts < 1:
        return first
    return min(cap, first * (2 ** min(attempts - 1, 30)))
