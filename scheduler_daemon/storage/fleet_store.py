"""Reads and writes the fleet-wide settings every replica must agree on (sql/fleet_setting.sql)."""

from datetime import timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from scheduler_daemon.domain.duration import parse_duration
from scheduler_daemon.domain.lock_holder import LockHolder
from scheduler_daemon.storage import query


def list_settings(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return query.run(conn, "fleet_setting_list")


def set_setting(
    conn: psycopg.Connection[Any], key: str, value: Any, updated_by: str
) -> dict[str, Any]:
    return query.run(
        conn, "fleet_setting_set", {"key": key, "value": Jsonb(value), "updated_by": updated_by}
    )


# Any fixed 64-bit key works; this one spells "schedbud" so it is recognisable in pg_locks.
BUDGET_LOCK_KEY = 0x7363686564627564


def is_budget_lock_wait(exc: psycopg.errors.LockNotAvailable) -> bool:
    """Whether a lock timeout ended a wait for the budget's lock (the claim function's
    `PERFORM pg_advisory_xact_lock`), not for a row lock."""
    return "pg_advisory_xact_lock" in (exc.diag.context or "")


def budget_lock_holders(conn: psycopg.Connection[Any]) -> list[LockHolder]:
    """The sessions holding the budget's lock right now (pg_locks is read live), oldest
    transaction first; any role may ask."""
    rows = query.run(conn, "fleet_budget_lock_holders", {"key": BUDGET_LOCK_KEY})
    return [LockHolder.from_row(row) for row in rows]


def budget(conn: psycopg.Connection[Any]) -> int:
    value = query.run(conn, "fleet_budget")
    return 0 if value is None else int(value)


def history_retention(conn: psycopg.Connection[Any]) -> timedelta | None:
    """The fleet's history retention; None when unset, `none`, or unreadable (keep all)."""
    text = query.run(conn, "fleet_history_retention")
    try:
        return None if text is None else parse_duration(text)
    except ValueError:
        return None


def partition_interval(conn: psycopg.Connection[Any]) -> timedelta | None:
    """The fleet's history partition interval; None when unset, `none`, or unreadable (the
    default, domain.partitioning.DEFAULT_INTERVAL)."""
    text = query.run(conn, "fleet_partition_interval")
    try:
        return None if text is None else parse_duration(text)
    except ValueError:
        return None


def sight_epoch(
    conn: psycopg.Connection[Any], seen_system: int | None = None, seen_timeline: int | None = None
) -> dict[str, Any] | None:
    """Records the fleet's first sighting of the database's current epoch (system identifier,
    timeline), if this is it and it is no older than a timeline recorded before or
    `seen_timeline` of `seen_system` (`epoch_sight`); returns the epoch, when it was first
    seen, whether this was the first sighting (`new`) and the newest timeline recorded before
    it (`newest_timeline`)."""
    params = {"seen_system": seen_system, "seen_timeline": seen_timeline}
    return query.run(conn, "epoch_sight", params)


def epoch_status(conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
    """The database's epoch as `status` shows it (`epoch_status`), writing nothing."""
    return query.run(conn, "epoch_status", {})
