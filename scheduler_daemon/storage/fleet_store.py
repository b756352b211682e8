"""Reads and writes the fleet-wide settings every replica must agree on (sql/fleet_setting.sql)."""

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from scheduler_daemon.storage import query


def list_settings(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return query.run(conn, "fleet_setting_list")


def set_setting(
    conn: psycopg.Connection[Any], key: str, value: Any, updated_by: str
) -> dict[str, Any]:
    return query.run(
        conn, "fleet_setting_set", {"key": key, "value": Jsonb(value), "updated_by": updated_by}
    )
