"""Reads and writes the fleet-wide settings every replica must agree on (sql/fleet_setting.sql)."""

from datetime import timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from scheduler_daemon.domain.duration import parse_duration
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
