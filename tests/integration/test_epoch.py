"""The fleet's first sighting of each database epoch (system identifier, timeline) starts a quiet
period, as the server's start does: no run is taken over within TTL + grace of a promotion the
fleet has just seen, so owners cut off by a failover renew first (issue 32, item 1; revision
0018). The real switchover is tests/ha/test_switchover.py."""

from datetime import timedelta

import psycopg
import pytest
from structlog.testing import capture_logs

from scheduler_daemon.services.reconciler import Reconciler
from scheduler_daemon.storage.database import connect, make_pool, transaction
from scheduler_daemon.storage.error import DatabaseUnavailable
from tests.support import launched_shell_run, query


def _sight(url: str) -> None:
    """A daemon's new connection: it records the epoch's first sighting."""
    from scheduler_daemon.storage.epoch import EpochWatch

    connect(url, autocommit=True, configure=EpochWatch()).close()


def _reconciler(pool, quiet: float) -> Reconciler:
    return Reconciler(
        pool,
        instance_id="r",
        restart_quiet=timedelta(seconds=quiet),
        max_interruptions=3,
        dead_after=timedelta(minutes=10),
    )


def test_every_new_connection_records_the_epoch_once_before_it_is_used(database_url) -> None:
    """The sighting goes with the connection, not with a reconcile pass: fails on 2a764ea
    (no storage.epoch; its pool's connections recorded nothing until a reconcile pass)."""
    from scheduler_daemon.storage.epoch import EpochWatch

    seen: list[str] = []
    timelines: list[int] = []
    watch = EpochWatch("w", on_new=lambda: seen.append("new"), on_timeline=timelines.append)
    with capture_logs() as logs:
        pool = make_pool(database_url, max_size=2, name="epoch test", configure=watch)
        pool.open(wait=True)
        try:
            rows = query(database_url, "SELECT system_identifier, timeline FROM fleet_epoch")
            with transaction(pool) as tx:  # the pool's connection is usable: nothing left open
                assert tx.conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
        finally:
            pool.close()
        with connect(database_url, configure=watch) as conn:  # non-autocommit: committed
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    (control,) = query(database_url, "SELECT system_identifier FROM pg_control_system()")
    assert [r["system_identifier"] for r in rows] == [control["system_identifier"]]
    assert len(query(database_url, "SELECT 1 FROM fleet_epoch")) == 1
    assert seen == ["new"]  # the first sighting is recorded once, by one connection
    assert len(timelines) >= 2  # every new connection: the pool's and the direct one
    assert set(timelines) == {rows[0]["timeline"]}
    new = [e for e in logs if e["event"] == "database_epoch_new"]
    assert len(new) == 1, logs
    assert (new[0]["instance_id"], new[0]["timeline"]) == ("w", rows[0]["timeline"])


def test_a_connection_to_an_older_epoch_is_refused_and_writes_nothing(database_url) -> None:
    """A server whose fleet_epoch records a later timeline of its system than its own is a
    former primary: the connection is closed before use (DatabaseUnavailable), no sighting is
    written, each refusal counted and `database_epoch_older` logged once a minute. Fails on
    2a764ea (no storage.epoch: its connections were used as they came)."""
    from scheduler_daemon.storage.epoch import EpochWatch, OlderEpoch

    EpochWatch().check(connect(database_url, autocommit=True))  # the current epoch, recorded
    query(
        database_url,
        "INSERT INTO fleet_epoch SELECT system_identifier, timeline + 1, now() FROM fleet_epoch"
        " RETURNING 1",
    )
    before = query(database_url, "SELECT * FROM fleet_epoch ORDER BY timeline")
    now = [1000.0]
    older: list[str] = []
    watch = EpochWatch("w", on_older=lambda: older.append("older"), clock=lambda: now[0])
    with capture_logs() as logs:
        for step in (0.0, 30.0, 31.0):  # refused at 1000 s, 1030 s and 1061 s
            now[0] += step
            with pytest.raises(OlderEpoch) as refused:
                connect(database_url, autocommit=True, configure=watch)
            assert isinstance(refused.value, DatabaseUnavailable)
    assert older == ["older"] * 3
    logged = [e for e in logs if e["event"] == "database_epoch_older"]
    assert len(logged) == 2, logs  # at 1000 s and at 1061 s, not at 1030 s
    assert (logged[0]["timeline"], logged[0]["newest_timeline"]) == (
        before[0]["timeline"],
        before[1]["timeline"],
    )
    assert query(database_url, "SELECT * FROM fleet_epoch ORDER BY timeline") == before


def test_no_run_is_taken_over_within_the_quiet_period_after_a_new_epoch_is_first_seen(
    client, pool, executors, database_url
) -> None:
    _, _, _, run = launched_shell_run(client, pool, executors, database_url, command="sleep 30")
    _sight(database_url)  # the current epoch, seen long before the "promotion"
    query(
        database_url,
        "UPDATE fleet_epoch SET first_seen_at = now() - interval '1 hour' RETURNING 1",
    )
    # A promotion the fleet has just seen: a later timeline, first seen now.
    query(
        database_url,
        "INSERT INTO fleet_epoch SELECT system_identifier, "
        "(SELECT max(timeline) + 1 FROM fleet_epoch), now() FROM pg_control_system() RETURNING 1",
    )
    query(
        database_url,
        "UPDATE run SET lease_expires_at = now() - interval '10 s', "
        "takeover_at = now() - interval '5 s' RETURNING 1",
    )
    quiet = _reconciler(pool, 5)
    assert quiet.run_once().ids["taken_over"] == []
    (inside,) = quiet.inside_lease()
    assert inside["takeover_from"] > inside["db_now"]  # recover --wait waits for it too
    query(
        database_url,
        "UPDATE fleet_epoch SET first_seen_at = first_seen_at - interval '6 s' "
        "WHERE first_seen_at > now() - interval '1 minute' RETURNING 1",
    )
    assert quiet.run_once().ids["taken_over"] == [run.run_id]
    run.job.stop("test over")


def test_status_shows_the_epoch_replication_and_the_last_failover_seen(cli, pool, database_url):
    fresh = cli("status", "--json")
    assert fresh.code == 0, fresh.err
    database = fresh.json()["database"]
    (control,) = query(database_url, "SELECT system_identifier::text AS s FROM pg_control_system()")
    assert database["epoch_detection"] == "available"
    assert database["system_identifier"] == control["s"]
    assert database["timeline"] >= 1
    assert (database["in_recovery"], database["synchronous"]) == (False, False)
    assert database["last_failover_seen_at"] is None  # the fleet has seen one epoch, if any
    _sight(database_url)
    query(  # a promotion seen later: a second epoch
        database_url,
        "INSERT INTO fleet_epoch SELECT system_identifier, "
        "(SELECT max(timeline) + 1 FROM fleet_epoch), now() + interval '1 s' "
        "FROM pg_control_system() RETURNING 1",
    )
    after = cli("status", "--json").json()["database"]
    assert after["last_failover_seen_at"] is not None
    text = cli("status").out
    assert "database: system " + control["s"] in text
    assert "replication asynchronous or none; last failover 20" in text
