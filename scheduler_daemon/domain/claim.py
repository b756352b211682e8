"""The rows of the hot path, typed: a claim (an occurrence this instance may launch) and a launch
(the run that claim became). Pure: built from the rows the statements return."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol


@dataclass(frozen=True)
class Claim:
    """One occurrence claimed by this instance (status `launching`, token raised), with what its
    job needs from the task."""

    id: int
    task_id: int
    occurrence_seq: int
    scheduled_for: datetime
    lease_token: int
    task_name: str
    executor: str
    payload: dict[str, Any]
    run_timeout: timedelta | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "Claim":
        return cls(
            id=row["id"],
            task_id=row["task_id"],
            occurrence_seq=row["occurrence_seq"],
            scheduled_for=row["scheduled_for"],
            lease_token=row["lease_token"],
            task_name=row["task_name"],
            executor=row["executor"],
            payload=row["payload"],
            run_timeout=row["run_timeout"],
        )


@dataclass(frozen=True)
class Launched:
    """The run one claim became: its occurrence is running and counts this attempt."""

    run_id: int
    occurrence_id: int
    attempt: int
    lease_token: int
    started_at: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "Launched":
        return cls(
            run_id=row["id"],
            occurrence_id=row["occurrence_id"],
            attempt=row["attempt"],
            lease_token=row["lease_token"],
            started_at=row["started_at"],
        )


@dataclass(frozen=True)
class ClaimRequest:
    """A claim ready to be sent: its named statement and parameters, and when it was made on
    this host's monotonic clock (the leases it takes start no earlier, so its jobs' trust
    deadline counts from then). The loop sends it alone, or after the successes whose slots it
    fills, in their transaction."""

    statement: tuple[str, dict[str, Any]]
    made_at: float


class Claimer(Protocol):
    """What sends a claim with a batch of successes needs of the launcher (`Completer.run_once`):
    the claim for the slots they free, and the start of what it claimed."""

    def request(self, freed: int = 0) -> ClaimRequest | None:
        """The claim for the free slots plus `freed`; None when none is free."""

    def launch(self, request: ClaimRequest, rows: list[dict[str, Any]]) -> Any:
        """Starts the jobs the committed claim `request` returned in `rows`."""
