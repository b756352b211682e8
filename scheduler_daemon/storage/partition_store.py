"""The history's partitions by time (ADR 0033): one upkeep through sd_partitions_v1, the list of
partitions, and what `status` shows of them (sql/partition.sql)."""

from datetime import timedelta
from typing import Any

import psycopg

from scheduler_daemon.domain import partitioning
from scheduler_daemon.storage import fleet_store, query


def upkeep(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """One upkeep with the fleet's interval and retention, in the caller's transaction; the
    function's answer (`created`, `dropped`, `moved_rows`, `kept_rows`, `dropped_rows`,
    `partitions_ahead`; or `busy`; or `error` and `sqlstate`; or `partitioned: false`)."""
    interval = fleet_store.partition_interval(conn) or partitioning.DEFAULT_INTERVAL
    retention = fleet_store.history_retention(conn)
    params: dict[str, timedelta | None] = {
        "interval": interval,
        "ahead": partitioning.ahead(interval),
        "retention": retention,
    }
    answer = query.run(conn, "partitions_keep_up", params)
    return dict(answer or {})


def partitions(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return query.run(conn, "partition_list")


def status(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    return dict(query.run(conn, "partition_status") or {})
