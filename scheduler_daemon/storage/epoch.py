"""EpochWatch: records the fleet's sighting of the server's epoch (system identifier, timeline) on
every new connection a daemon process opens, before it is used, and refuses a connection to an
older epoch than this process or the server's record has seen (issue 32, items 1 and 4)."""

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import structlog

from scheduler_daemon.storage import fleet_store
from scheduler_daemon.storage.database import first_line
from scheduler_daemon.storage.error import DatabaseUnavailable

log = structlog.get_logger()
OLDER_LOG_SECONDS = 60.0
"""`database_epoch_older` is logged at most once this often (every refusal is counted)."""
# The server will not say (a managed service may revoke pg_control_system, or the schema
# predates fleet_epoch): the connection is used anyway and the restart rule alone applies.
_UNAVAILABLE = (
    psycopg.errors.InsufficientPrivilege,
    psycopg.errors.UndefinedFunction,
    psycopg.errors.UndefinedTable,
)


class OlderEpoch(DatabaseUnavailable):
    """The server is on an older timeline of the fleet's database than one already seen: a
    former primary still taking writes. An outage: nothing is written there."""


class EpochWatch:
    """One per process, shared by its threads: `check(conn)` (a pool's `configure=`, and after
    every direct `connect`) runs `epoch_sight` on the new autocommit connection. A first
    sighting in the fleet is logged (`database_epoch_new`) and reported (`on_new`); every
    sighting reports the timeline (`on_timeline`). An older epoch closes the connection and
    raises OlderEpoch, reported (`on_older`) and logged at most once a minute; a server in
    recovery raises DatabaseUnavailable; a server that refuses the functions is said once
    (`epoch_detection_unavailable`) and its connection used anyway."""

    def __init__(
        self,
        instance_id: str | None = None,
        *,
        on_new: Callable[[], None] = lambda: None,
        on_timeline: Callable[[int], None] = lambda _timeline: None,
        on_older: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log.bind(instance_id=instance_id) if instance_id else log
        self.on_new = on_new
        self.on_timeline = on_timeline
        self.on_older = on_older
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: dict[int, int] = {}  # system identifier -> the latest timeline reached
        self._system: int | None = None  # the system identifier last reached
        self._older_logged_at: float | None = None
        self._unavailable_said = False

    def __call__(self, conn: psycopg.Connection[Any]) -> None:
        self.check(conn)

    def check(self, conn: psycopg.Connection[Any]) -> None:
        """Sights the epoch on the new `conn`, leaving no transaction open."""
        try:
            epoch = self._sight(conn)
        except psycopg.errors.ObjectNotInPrerequisiteState as exc:  # recovery is in progress
            conn.close()
            raise DatabaseUnavailable(f"database is in recovery: {first_line(exc)}") from exc
        except _UNAVAILABLE as exc:
            with self._lock:
                said, self._unavailable_said = self._unavailable_said, True
            if not said:
                self.log.warning("epoch_detection_unavailable", error=first_line(exc))
            return
        if epoch is None:
            return
        system, timeline = int(epoch["system_identifier"]), int(epoch["timeline"])
        with self._lock:
            newest = max(self._seen.get(system, 0), epoch["newest_timeline"] or 0)
            if timeline < newest:
                self._refuse(conn, system, timeline, newest)
            self._seen[system], self._system = timeline, system
        self.on_timeline(timeline)
        if epoch["new"]:
            self.on_new()
            self.log.warning(
                "database_epoch_new",
                system_identifier=str(system),
                timeline=timeline,
                first_seen_at=epoch["first_seen_at"].isoformat(),
            )

    def _sight(self, conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
        with self._lock:
            system = self._system
            timeline = None if system is None else self._seen[system]
        if conn.autocommit:
            return fleet_store.sight_epoch(conn, system, timeline)
        with conn.transaction():  # committed at once: no transaction is left open
            return fleet_store.sight_epoch(conn, system, timeline)

    def _refuse(
        self, conn: psycopg.Connection[Any], system: int, timeline: int, newest: int
    ) -> None:
        """Called with the lock held: counts, logs at most once a minute, closes, raises."""
        conn.close()
        self.on_older()
        now = self.clock()
        if self._older_logged_at is None or now - self._older_logged_at >= OLDER_LOG_SECONDS:
            self._older_logged_at = now
            self.log.error(
                "database_epoch_older",
                system_identifier=str(system),
                timeline=timeline,
                newest_timeline=newest,
                hint="a former primary takes writes: fence it (the HA tool must); "
                "nothing is written there, and this daemon retries",
            )
        raise OlderEpoch(
            f"database is on timeline {timeline}, older than timeline {newest} already seen"
        )
