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


def in_use(conn: psycopg.Connection[Any]) -> bool:
    return bool(query.run(conn, "partition_in_use"))


def row_by_row_retention(
    conn: psycopg.Connection[Any], retention: timedelta | None
) -> timedelta | None:
    """The fleet retention the row-by-row prune applies (ADR 0033): on partitioned history,
    one partition interval past `retention`, so that what a partition drop removes whole is not
    deleted row by row first; the prune still takes what no drop can (a task's shorter retention,
    rows kept in or fallen into the DEFAULT partition, a stalled upkeep's history) one interval
    later. Unpartitioned, `retention` itself."""
    if retention is None or not in_use(conn):
        return retention
    return retention + (fleet_store.partition_interval(conn) or partitioning.DEFAULT_INTERVAL)
