"""Notifications (pure): the row a deliverer claimed, the body it POSTs, and the backoff after a
failed POST."""

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from scheduler_daemon.domain.json_text import MAX_DEPTH, UndecodableJson, loads_bounded
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

    problem: str | None = None  # why its payload or headers cannot be read: its error, unsent

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "Notification":
        """The claimed row; its payload and headers (JSON texts, or decoded values) read within
        MAX_DEPTH, one that cannot be read making `problem` instead of an exception, since the
        row's claim has committed and the pass must go on."""
        problem = None
        try:
            payload = _object(row["payload"])
            headers = {} if row["headers"] is None else _object(row["headers"])
        except UndecodableJson as exc:
            payload, headers = {}, {}
            problem = f"its payload or headers cannot be read: {exc}"
        return cls(
            id=row["id"],
            delivery_id=str(row["delivery_id"]),
            occurrence_id=row["occurrence_id"],
            task_id=row["task_id"],
            event=row["event"],
            payload=payload,
            attempts=row["attempts"],
            url=row["url"],
            headers={str(k): str(v) for k, v in headers.items()},
            problem=problem,
        )

    def body(self) -> dict[str, Any]:
        """The JSON every POST of this row sends: its payload and its `delivery_id`."""
        return {**self.payload, "delivery_id": self.delivery_id}


def _object(value: Any) -> dict[str, Any]:
    """A JSON object from its text (or as decoded already); UndecodableJson otherwise."""
    if isinstance(value, str):
        value = loads_bounded(value, MAX_DEPTH)
    if not isinstance(value, dict):
        raise UndecodableJson(f"not a JSON object but {type(value).__name__}")
    return value


def backoff(
    attempts: int, first: timedelta = BACKOFF_FIRST, cap: timedelta = BACKOFF_CAP
) -> timedelta:
    """The wait after the `attempts`-th failed POST: `first`, doubling, at most `cap`."""
    if attempts < 1:
        return first
    return min(cap, first * (2 ** min(attempts - 1, 30)))
