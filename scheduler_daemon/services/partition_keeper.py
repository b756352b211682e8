"""Partition keeper: the history's partition upkeep from the daemon's reconcile step (ADR 0033).

At most once every UPKEEP_EVERY_SECONDS per daemon, one short transaction calls
sd_partitions_v1 (the owner's SECURITY DEFINER function: the daemon role can neither create nor
drop tables) with the fleet's partition interval and history retention. The function creates
the partitions ahead and for rows fallen into the DEFAULT partition, drops those past the
retention (keeping what the keep rule keeps), bounds its lock waits by a 100 ms lock_timeout,
and lets one daemon of the fleet work at a time (the others are told `busy`). A refusal it
records (`error`: a held lock, 55P03, tried twice more first, so a minute's upkeep holds the
loop 0.4 s at most; or anything else) is raised here as UpkeepFailed, which the loop counts and
logs at most once a minute without failing its step. Fewer than WARN_AHEAD partitions ahead is
warned (once per call, so once a minute).
"""

import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon.domain import partitioning
from scheduler_daemon.storage import partition_store
from scheduler_daemon.storage.database import transaction

log = structlog.get_logger()
LOCK_NOT_AVAILABLE = "55P03"
LOCK_TRIES = 3  # calls per upkeep while its lock waits time out (each waits 100 ms at most)
RETRY_PAUSE = 0.05  # seconds between them: the hot set's own transactions last milliseconds


class UpkeepFailed(RuntimeError):
    """The upkeep function gave up (its work undone) and recorded why; the message is its
    error, with the SQLSTATE."""


@dataclass(eq=False)
class PartitionKeeper:
    pool: ConnectionPool
    _: KW_ONLY
    instance_id: str
    every: float = partitioning.UPKEEP_EVERY_SECONDS
    clock: Callable[[], float] = time.monotonic
    # An Event's wait, not time.sleep: under libfaketime (the soak's skewed daemon) time.sleep
    # fails with EINVAL (clock_nanosleep on an absolute monotonic time), which failed the upkeep.
    sleep: Callable[[float], object] = field(default_factory=lambda: threading.Event().wait)
    partitions_ahead: int | None = field(default=None, init=False)  # from the last answer
    _last: float = field(default=float("-inf"), init=False)

    def __post_init__(self) -> None:
        self.log = log.bind(instance_id=self.instance_id)

    def due(self) -> bool:
        return self.clock() - self._last >= self.every

    def maybe_run(self) -> dict[str, Any] | None:
        """run_once when a call is due (a failed call counts: the next waits as long)."""
        if not self.due():
            return None
        self._last = self.clock()
        return self.run_once()

    def run_once(self) -> dict[str, Any]:
        """One upkeep; its answer (partition_store.upkeep). A give-up on a held lock (55P03:
        the ATTACH or DETACH met a transaction on the hot set) is tried again up to
        LOCK_TRIES times, RETRY_PAUSE apart; UpkeepFailed when it still gave up."""
        for attempt in range(1, LOCK_TRIES + 1):
            with transaction(self.pool) as tx:
                answer = partition_store.upkeep(tx.conn)
            if answer.get("sqlstate") != LOCK_NOT_AVAILABLE or attempt == LOCK_TRIES:
                break
            self.sleep(RETRY_PAUSE)
        if "error" in answer:
            raise UpkeepFailed(f"{answer['error']} (SQLSTATE {answer.get('sqlstate')})")
        if answer.get("created") or answer.get("dropped"):
            self.log.info(
                "partitions_kept_up",
                created=len(answer.get("created") or []),
                dropped=len(answer.get("dropped") or []),
                moved_rows=answer.get("moved_rows"),
                kept_rows=answer.get("kept_rows"),
                partitions_ahead=answer.get("partitions_ahead"),
            )
        if "partitions_ahead" in answer:
            self.partitions_ahead = answer["partitions_ahead"]
            if partitioning.too_few_ahead(self.partitions_ahead):
                self.log.warning(
                    "few_partitions_ahead",
                    partitions_ahead=self.partitions_ahead,
                    at_least=partitioning.WARN_AHEAD,
                )
        return answer
