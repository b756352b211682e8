"""The Client's view of the fleet: its instances, queue and budget (`status`), and the fleet
settings."""

import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import psycopg

from scheduler_daemon.client.base import ClientBase, refuse_if_older
from scheduler_daemon.domain import argument, partitioning
from scheduler_daemon.domain.duration import parse_duration
from scheduler_daemon.domain.instance import Instance
from scheduler_daemon.domain.lock_holder import CONFIRM_AFTER_SECONDS, LockHolder, held_throughout
from scheduler_daemon.storage import (
    fleet_store,
    instance_store,
    migration,
    occurrence_store,
    outbox_store,
    partition_store,
    run_store,
    task_store,
)
from scheduler_daemon.storage.database import first_line


class Fleet(ClientBase):
    """The fleet as a whole: who runs, what waits, and the settings every daemon reads."""

    def status(self) -> dict[str, Any]:
        """Registered instances, queue depth, executing runs against the budget, takeover bounds,
        and who holds the budget's lock longer than a claim does (`budget_lock_holders`)."""
        with self._tx() as conn:
            schema = migration.state_of(conn).fields()
            oldest = schema["oldest_build"]
            instances: list[Instance] = [
                # can this instance's build write to the schema as it is?
                replace(
                    row,
                    compatible=oldest is not None
                    and migration.build().works_after(row.schema_revision, oldest),
                )
                for row in instance_store.list_instances(conn)
            ]
            status = {
                "instances": instances,
                "schema": schema,
                "running_by_build": run_store.running_by_build(conn),
                "queue_depth": occurrence_store.queue_depth(conn),
                "executing_runs": occurrence_store.executing_count(conn),
                "max_concurrent_runs": fleet_store.budget(conn),
                "parked_tasks": task_store.parked(conn),
                "pending_resumes": task_store.pending_resumes(conn),
                "overdue_tasks": task_store.overdue_summary(conn),
                "notifications": outbox_store.counts(conn),
                "partitions": partition_store.status(conn),  # ADR 0033
            }
            holders = fleet_store.budget_lock_holders(conn)
        return {
            **status,
            "budget_lock_holders": self._still_holding(holders),
            "database": self._database(),
        }

    def _database(self) -> dict[str, Any]:
        """The database's epoch and replication (issue 32), in a transaction of its own: a
        server that refuses `pg_control_system()` (some managed services) fails only this part."""
        try:
            with self._tx() as conn:
                return {"epoch_detection": "available", **(fleet_store.epoch_status(conn) or {})}
        except psycopg.errors.InsufficientPrivilege as exc:
            return {"epoch_detection": f"unavailable: {first_line(exc)}"}

    def _still_holding(self, first: list[LockHolder]) -> list[LockHolder]:
        """The holders of the budget's lock in `first` whose transaction still holds it a moment
        later: not a daemon's claim, which holds it for milliseconds. No wait when none held it."""
        if not first:
            return []
        time.sleep(CONFIRM_AFTER_SECONDS)
        with self._tx() as conn:
            return held_throughout(first, fleet_store.budget_lock_holders(conn))

    @staticmethod
    def _check_partition_count(conn: psycopg.Connection[Any], key: str, stored: Any) -> None:
        """A retention that would span more than 1,000 partitions of the interval (either one
        being set, the other as stored) is refused, nothing written (ADR 0033)."""
        given = None if stored is None else parse_duration(stored)
        retention = given if key == "history_retention" else fleet_store.history_retention(conn)
        interval = given if key != "history_retention" else fleet_store.partition_interval(conn)
        try:
            partitioning.check_count(retention, interval)
        except partitioning.BadPartitioning as exc:
            raise argument.InvalidArgument(str(exc)) from None

    def running_now(self, *, limit: int) -> list[dict[str, Any]]:
        """The running runs, oldest start first, at most `limit`: owner, lease expiry, takeover
        point, and the database's `db_now` (the console's "running now")."""
        with self._tx() as conn:
            return run_store.running_page(conn, limit=limit)

    def takeovers_since(self, since: timedelta, *, cap: int) -> int:
        """How many runs were taken over within `since` (the database clock), up to `cap`."""
        with self._tx() as conn:
            return run_store.takeovers_since(conn, since, cap=cap)

    # -- fleet settings --------------------------------------------------------------------------
    def fleet_settings(self) -> dict[str, Any]:
        with self._tx() as conn:
            return {row["key"]: row["value"] for row in fleet_store.list_settings(conn)}

    def set_fleet_setting(
        self, name: str, value: str | Sequence[str], *, updated_by: str
    ) -> dict[str, Any]:
        """Sets `name` to `value`: one text, or for `notify-headers` one 'NAME: VALUE' each."""
        key, stored = argument.fleet_setting(name, value)  # within its bound (domain/limit.py)
        with self._tx() as conn:
            refuse_if_older(conn, key)  # a setting an older build would misread (ADR 0029)
            if key in ("history_retention", "history_partition_interval"):
                self._check_partition_count(conn, key, stored)
            return fleet_store.set_setting(conn, key, stored, updated_by)
