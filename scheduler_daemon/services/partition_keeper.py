"""Partition keeper: the history's partition upkeep from the daemon's reconcile step (ADR 0033).

At most once every UPKEEP_EVERY_SECONDS per daemon, one short transaction calls
sd_partitions_v1 (the owner's SECURITY DEFINER function: the daemon role can neither create nor
drop tables) with the fleet's partition interval and history retention. The function creates
the partitions ahead and for rows fallen into the DEFAULT partition, drops those past the
retention (keeping what the keep rule keeps), bounds its lock waits by a 100 ms lock_timeout,
and lets one daemon of the fleet work at a time (the others are told `busy`). A refusal it
records (`error`: a held lock, 55P03, or anything else) is raised here as UpkeepFailed, which the
loop counts and logs at most once a minute without failing its step: the hot path never waits
on upkeep. Fewer than WARN_AHEAD partitions ahead is warned (once per call, so once a minute).
"""

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
        """One upkeep; its answer (partition_store.upkeep). UpkeepFailed when it gave up."""
        with transaction(self.pool) as tx:
            answer = partition_store.upkeep(tx.conn)
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
