"""The lease keeper against a real database: a renewal after a takeover is fenced and stops
the job; an instance removed by a peer registers again; what its failures mean to the daemon's
supervision (ADR 0005): an unexpected error counts, a lock error, an outage or a read-only
server does not."""

from typing import Any

import psycopg
from psycopg import sql

from scheduler_daemon.runtime.supervision import Vital
from tests.support import Replica, launched_shell_run, query, snapshot, wait_for


def test_a_renewal_after_a_takeover_stops_the_job_and_writes_nothing(
    client, pool, executors, database_url
) -> None:
    _, _, replica, run = launched_shell_run(
        client, pool, executors, database_url, command="sleep 30"
    )
    assert replica.keeper.run_once() == set()  # renewed while the token is ours
    # A peer took the run over (as the reconciler's compare-and-set does) and re-queued it.
    query(
        database_url,
        "UPDATE run SET status = 'interrupted', finished_at = now(), finished_by = 'peer' "
        "RETURNING id",
    )
    before = snapshot(database_url)
    assert replica.keeper.run_once() == {run.run_id}
    outcome = wait_for(run.job.poll, timeout=5, message="the fenced job to stop")
    assert outcome.status == "stopped"
    assert replica.completer.run_once().done == 1  # dropped, not written
    assert snapshot(database_url) == before


def test_an_instance_removed_by_a_peer_registers_again_at_its_next_heartbeat(
    pool, executors, database_url
) -> None:
    replica = Replica(database_url, pool, executors, "frozen-once")
    calls: list[object] = []
    replica.keeper.reregister = calls.append
    replica.keeper.run_once()  # no instance row: as after a peer removed it as dead
    assert calls == [None]


def _supervised(keeper: Any, limit: int) -> Vital:
    """The keeper's reports wired to supervision as the daemon wires them (runtime/daemon.py)."""
    vital = Vital("lease keeper", limit)
    keeper.on_failure = vital.failed
    keeper.on_pass = lambda fenced: fenced is not None and vital.succeeded()
    return vital


def _break_renewals(url: str) -> None:
    """Every update of a run row now fails, as a dropped column or a revoked privilege would."""
    query(
        url,
        "CREATE FUNCTION injected_failure() RETURNS trigger LANGUAGE plpgsql AS "
        "$$BEGIN RAISE EXCEPTION 'injected: renewal broken'; END$$",
    )
    query(
        url,
        "CREATE TRIGGER injected_failure BEFORE UPDATE ON run "
        "FOR EACH ROW EXECUTE FUNCTION injected_failure()",
    )


def test_a_renewal_that_keeps_raising_an_unexpected_error_fails_the_keeper(
    client, pool, executors, database_url
) -> None:
    _, _, replica, run = launched_shell_run(
        client, pool, executors, database_url, command="sleep 30"
    )
    vital = _supervised(replica.keeper, limit=2)
    _break_renewals(database_url)
    assert replica.keeper.reported_once() is None  # reported, not raised
    assert vital.problem() is None
    assert replica.keeper.reported_once() is None
    assert vital.problem() == "failed 2 passes in a row: injected: renewal broken"
    run.job.stop("test over")


def test_a_lock_error_an_outage_or_a_read_only_server_never_counts_against_the_keeper(
    client, pool, executors, database_url
) -> None:
    _, _, replica, run = launched_shell_run(
        client, pool, executors, database_url, command="sleep 30"
    )
    keeper = replica.keeper
    vital = _supervised(keeper, limit=1)  # one counted failure would be enough
    # A lock error: another session holds the run's row past the renewal's lock_timeout (5 s).
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT 1 FROM run FOR UPDATE")
        assert keeper.reported_once() is None
    # An outage: the keeper cannot connect.
    keeper.url, url = "postgresql://postgres@127.0.0.1:1/none?connect_timeout=1", keeper.url
    keeper._conn.close()
    assert keeper.reported_once() is None
    # A server that accepts no writes (a standby, a demoted primary): SQLSTATE 25006.
    keeper.url = url
    name = sql.Identifier(query(url, "SELECT current_database() AS name")[0]["name"])
    alter = sql.SQL("ALTER DATABASE {} ").format(name)
    query(url, alter + sql.SQL("SET default_transaction_read_only = on"))
    try:
        assert keeper.reported_once() is None
        assert keeper.reported_once() is None  # again, on the connection it made afresh
    finally:
        with psycopg.connect(
            url, autocommit=True, options="-c default_transaction_read_only=off"
        ) as conn:
            conn.execute(alter + sql.SQL("RESET default_transaction_read_only"))
    assert vital.failures == 0
    assert vital.problem() is None
    assert keeper.reported_once() == set()  # and it renews again
    run.job.stop("test over")
