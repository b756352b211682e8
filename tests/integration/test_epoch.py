"""The fleet's first sighting of each database epoch (system identifier, timeline) starts a quiet
period, as the server's start does: no run is taken over within TTL + grace of a promotion the
fleet has just seen, so owners cut off by a failover renew first (issue 32, item 1; revision
0018). The real switchover is tests/ha/test_switchover.py."""

from datetime import timedelta

from scheduler_daemon.services.reconciler import Reconciler
from tests.support import launched_shell_run, query


def _reconciler(pool, quiet: float) -> Reconciler:
    return Reconciler(
        pool,
        instance_id="r",
        restart_quiet=timedelta(seconds=quiet),
        max_interruptions=3,
        dead_after=timedelta(minutes=10),
    )


def test_a_reconcile_pass_records_the_epoch_once(pool, database_url) -> None:
    _reconciler(pool, 0).run_once()
    _reconciler(pool, 0).run_once()
    rows = query(database_url, "SELECT system_identifier, timeline, first_seen_at FROM fleet_epoch")
    (control,) = query(database_url, "SELECT system_identifier FROM pg_control_system()")
    assert [r["system_identifier"] for r in rows] == [control["system_identifier"]]
    assert rows[0]["timeline"] >= 1
    assert _reconciler(pool, 0).run_once(dry_run=True).changed == 0  # a dry run writes nothing


def test_no_run_is_taken_over_within_the_quiet_period_after_a_new_epoch_is_first_seen(
    client, pool, executors, database_url
) -> None:
    _, _, _, run = launched_shell_run(client, pool, executors, database_url, command="sleep 30")
    _reconciler(pool, 0).run_once()  # the current epoch, seen long before the "promotion"
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
    _reconciler(pool, 0).run_once()
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
