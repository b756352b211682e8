"""The soak's planned switchover on its streaming pair, and what it must not have changed.

Late in the soak the primary stops cleanly, no primary exists for longer than TTL + grace (every
lease of the runs running at the stop passes during the gap), and the standby is promoted; the
fleet keeps the multi-host URL it was started with. `run()` drives it and records the evidence:
the runs running at the stop (owners alive then) and whether every daemon of the fleet started
and finished work on the new primary. `problems()` is the verdict afterwards: none of those runs
taken over (no `run_taken_over` event for it), each finished by its own owner. A daemon that
ended with a supervised exit meanwhile (exit 9: an in-process job of its ran past its trust
deadline during the gap, docs/guarantees.md) is no owner alive through the switchover: its runs
are taken over as any dead owner's, counted apart and judged by the audit.
"""

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tests.ha.pair import ReplicationPair
from tests.support import query, wait_for

TTL, GRACE, RECONCILE = 3.0, 1.0, 1.0  # tests.support.FAST
GAP = TTL + GRACE + 2.0  # no primary at all for longer than any lease and its grace


class Switchover:
    """One planned switchover of `pair` under a fleet whose live instance ids `live()` returns."""

    def __init__(
        self,
        pair: ReplicationPair,
        url: str,
        live: Callable[[], set[str]],
        exited: Callable[[], set[str]] = set,
        spare: Callable[[], bool] = lambda: True,
    ) -> None:
        self.pair, self.url, self.live, self.exited = pair, url, live, exited
        self.spare = spare  # whether some daemon would live through the gap (no exit 9 due)
        self.across: list[dict[str, Any]] = []  # running at the stop, owner alive then
        self.dead_owned = 0  # running at the stop, owner killed before it (not judged)
        self.gap = 0.0  # seconds without a primary, measured around the stop and the promotion
        self.stopped_at: datetime | None = None  # database clock just before the stop
        self.promoted_at: datetime | None = None  # the new primary's clock just after promotion
        self.back_at_work = 0.0  # seconds from the promotion until every daemon ran a job again
        self.gone: set[str] = set()  # owners of runs across that exited on their own meanwhile

    @property
    def leases_passed(self) -> int:
        """Runs running at the stop whose takeover point passed while no primary existed: the
        window the switchover exists to enter."""
        if self.promoted_at is None:
            return 0
        return sum(r["takeover_at"] < self.promoted_at for r in self._judged())

    def _judged(self) -> list[dict[str, Any]]:
        """The runs across whose owners did not exit on their own before the fleet was back at
        work (in the gap: exit 9); a later exit is not the switchover's and changes nothing."""
        return [r for r in self.across if r["owner"] not in self.gone]

    def _owned_by_dead(self) -> list[dict[str, Any]]:
        live = self.live()
        rows = query(self.url, "SELECT id, owner FROM run WHERE status = 'running'")
        return [r for r in rows if r["owner"] not in live]

    def run(self) -> None:
        # Runs of daemons killed by the faults before are taken over first (within the takeover
        # bound), so that every run crossing the switchover has a live owner to end it.
        wait_for(
            lambda: not self._owned_by_dead(),
            timeout=3 * (TTL + GRACE + RECONCILE),
            interval=0.2,
            message="the takeovers of earlier faults before the switchover",
        )
        self.pair.wait_streaming()
        self.pair.wait_replayed()
        # An in-process job that outlives its trust deadline in the gap ends its daemon (exit 9);
        # wait (a while) until a daemon runs jobs but none such, so that some owner of runs
        # lives through the gap.
        limit = time.monotonic() + 30
        while not self.spare() and time.monotonic() < limit:
            time.sleep(0.1)
        live = self.live()
        running = query(
            self.url,
            """SELECT r.id, r.owner, r.takeover_at, now() AS at FROM run r
               WHERE r.status = 'running' ORDER BY r.id""",
        )
        started = time.monotonic()
        self.pair.switchover(GAP)
        self.gap = time.monotonic() - started
        (promoted,) = query(self.url, "SELECT now() AS t")
        self.promoted_at = promoted["t"]
        self.stopped_at = running[0]["at"] if running else None
        self.across = [r for r in running if r["owner"] in live]
        self.dead_owned = len(running) - len(self.across)
        # Back at work: every daemon of the fleet started a job after the promotion that ended
        # in success (exclusive claims wait out the new epoch's quiet period; the others not).
        wait_for(  # the fleet's daemons now: one that exited 9 in the gap was restarted
            lambda: self.live() <= self._succeeded_since_promotion(),
            timeout=60,
            interval=0.2,
            message="every daemon to run jobs again on the new primary",
        )
        self.back_at_work = time.monotonic() - started - self.gap
        self.gone = self.exited() & {r["owner"] for r in self.across}

    def _succeeded_since_promotion(self) -> set[str]:
        """The owners of runs started after the promotion that ended in success."""
        rows = query(
            self.url,
            "SELECT DISTINCT owner FROM run WHERE status = 'success' AND started_at > %s",
            (self.promoted_at,),
        )
        return {r["owner"] for r in rows}

    def problems(self, events: list[dict[str, Any]]) -> list[str]:
        """What the switchover changed that it must not have: runs running at the stop taken
        over (a `run_taken_over` event, as the soak counts takeovers), or ended by anyone but
        their owner, or never ended."""
        ids = [r["id"] for r in self._judged()]
        taken = sorted({e["run_id"] for e in events if e.get("event") == "run_taken_over"})
        found = [f"run {i} taken over after the switchover" for i in sorted(set(ids) & set(taken))]
        ended = query(
            self.url,
            "SELECT id, owner, finished_by, status, error FROM run WHERE id = ANY(%s) ORDER BY id",
            (ids,),
        )
        found += [
            f"run {r['id']} of {r['owner']} ended {r['status']} by {r['finished_by']}: {r['error']}"
            for r in ended
            if r["finished_by"] != r["owner"]
        ]
        missing = sorted(set(ids) - {r["id"] for r in ended})
        if missing:
            found.append(f"runs missing on the new primary: {missing}")
        return found

    def figures(self) -> dict[str, Any]:
        return {
            "gap_s": round(self.gap, 1),
            "runs_across": len(self.across),
            "leases_passed": self.leases_passed,
            "dead_owned_at_stop": self.dead_owned,
            "owner_exited_since": len(self.across) - len(self._judged()),
            "back_at_work_s": round(self.back_at_work, 1),
        }
