"""Whether a registered instance is live, draining, silent past its lease or past its takeover
bound, from how long ago the database last heard from it (pure; `status`)."""

from datetime import timedelta
from enum import StrEnum

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


def unserved_queue_warning(queue_depth: int, states: list[InstanceState]) -> str | None:
    """`status`'s warning when queued work has no live instance to claim it (a draining one
    claims nothing); None when nothing is queued or some instance is live."""
    if queue_depth == 0 or InstanceState.LIVE in states:
        return None
    if not states:
        why = "no instance is registered"
    else:
        counts: dict[str, int] = {}
        for state in states:
            counts[state.text] = counts.get(state.text, 0) + 1
        why = "the registered are " + ", ".join(f"{n} {s}" for s, n in counts.items())
    return (
        f"{queue_depth} queued occurrence(s) and no live instance to run them ({why}); "
        "start `scheduler-daemon run`"
    )
