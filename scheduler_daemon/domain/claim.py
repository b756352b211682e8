"""The rows of the hot path, typed: a claim (an occurrence this instance may launch) and a launch
(the run that claim became). Pure: both read from one row of the claim (`FromRow`, by name)."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from scheduler_daemon.domain.row import FromRow


@dataclass(frozen=True)
class Claim(FromRow):
    """One occurrence claimed by this instance (its token raised), with what its job needs from
    the task."""

    id: int
    task_id: int
    scheduled_for: datetime
    lease_token: int  # the occurrence's and its run's
    task_name: str
    executor: str
    payload: dict[str, Any]
    run_timeout: timedelta | None


@dataclass(frozen=True)
class Launched(FromRow):
    """The run one claim became (the claim's `id` is its occurrence, its `lease_token` the run's):
    its occurrence is running and counts this attempt."""

    run_id: int
    attempt: int
    started_at: datetime


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
