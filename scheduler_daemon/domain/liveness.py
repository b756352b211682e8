"""Whether a registered instance is live, draining, silent past its lease or past its takeover
bound, from how long ago the database last heard from it (pure; `status`)."""

from collections.abc import Mapping
from datetime import timedelta
from enum import StrEnum
from typing import Any

from scheduler_daemon.domain.timing import takeover_bound


class InstanceState(StrEnum):
    """What `status` says of an instance (docs/cli.md#status): the JSON value; `text` is the
    words of its text output."""

    LIVE = "live"
    DRAINING = "draining"
    SILENT = "silent_past_lease"
    PAST_TAKEOVER = "past_takeover_bound"

    @property
    def text(self) -> str:
        """`live`, `draining`, `silent past its lease`, `past the takeover bound`."""
        return _TEXT[self]


_TEXT = {
    InstanceState.LIVE: "live",
    InstanceState.DRAINING: "draining",
    InstanceState.SILENT: "silent past its lease",
    InstanceState.PAST_TAKEOVER: "past the takeover bound",
}


def instance_state(
    silent_for: timedelta,
    *,
    lease_ttl: timedelta,
    lease_grace: timedelta,
    reconcile_interval: timedelta,
    stopping: bool,
) -> InstanceState:
    """The state of an instance last heard from `silent_for` ago (database clock: its heartbeat,
    sent with every renewal pass, every TTL/3), by its own lease settings. Within its TTL it is
    `live`, or `draining` when its last heartbeat said it stops (it claims nothing new). Past
    its TTL every lease it held has ended unrenewed, whatever it said: `silent past its lease`;
    past its takeover bound (TTL + grace + reconcile interval, the number `status` prints beside
    it) its runs have been taken over, or are overdue to be: `past the takeover bound`."""
    if silent_for > takeover_bound(lease_ttl, lease_grace, reconcile_interval):
        return InstanceState.PAST_TAKEOVER
    if silent_for > lease_ttl:
        return InstanceState.SILENT
    return InstanceState.DRAINING if stopping else InstanceState.LIVE


def fleet_warnings(
    queue_depth: int, overdue_tasks: Mapping[str, Any], states: list[InstanceState]
) -> list[str]:
    """`status`'s warnings: queued work, or tasks past their misfire grace (`overdue_tasks`:
    its `count` and `oldest_next_run_at`), with no live instance."""
    found = [
        unserved_queue_warning(queue_depth, states),
        stalled_schedule_warning(
            overdue_tasks["count"], overdue_tasks["oldest_next_run_at"], states
        ),
    ]
    return [w for w in found if w is not None]


def unserved_queue_warning(queue_depth: int, states: list[InstanceState]) -> str | None:
    """`status`'s warning when queued work has no live instance to claim it (a draining one
    claims nothing); None when nothing is queued or some instance is live."""
    if queue_depth == 0 or InstanceState.LIVE in states:
        return None
    return (
        f"{queue_depth} queued occurrence(s) and no live instance to run them "
        f"({_registered(states)}); start `scheduler-daemon run`"
    )


def stalled_schedule_warning(
    overdue_tasks: int, oldest: str | None, states: list[InstanceState]
) -> str | None:
    """`status`'s warning when some task's next firing is past its misfire grace and no
    instance is live to dispatch it (a stopped fleet: its firings are owed, and will be run or
    skipped by each task's misfire policy when a daemon starts); None otherwise."""
    if overdue_tasks == 0 or InstanceState.LIVE in states:
        return None
    return (
        f"{overdue_tasks} task(s) past their next firing by more than their misfire grace "
        f"(the oldest due {oldest}) and no live instance to dispatch them "
        f"({_registered(states)}); start `scheduler-daemon run`"
    )


def _registered(states: list[InstanceState]) -> str:
    """Why no instance is live: none registered, or how many are in each other state."""
    if not states:
        return "no instance is registered"
    counts: dict[str, int] = {}
    for state in states:
        counts[state.text] = counts.get(state.text, 0) + 1
    return "the registered are " + ", ".join(f"{n} {s}" for s, n in counts.items())
