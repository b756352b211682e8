"""The lease keeper against a real database: a renewal after a takeover is fenced and stops
the job; an instance removed by a peer registers again; what its failures mean to the daemon's
supervision (ADR 0005): an unexpected error counts, a held row, an outage or a read-only
server does not; and a run or instance row another session holds delays only its own renewal or
the heartbeat, never the other runs' renewals (issue 31)."""

import time
from typing import Any

import psycopg
from psycopg import sql
from structlog.testing import capture_logs

from scheduler_daemon.runtime.supervision import Vital
from tests.support import Replica, launched_shell_run, query, shell_task, snapshot, wait_for


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
    # Another session holds the run's row past the renewal's lock wait: no longer a failed pass
    # (issue 31) but a good one in which that run was neither renewed nor fenced.
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT 1 FROM run FOR UPDATE")
        assert keeper.reported_once() == set()
        assert not run.fenced
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


# -- one held row delays only its own renewal (issue 31 item 1, guarantee 4) ----------------------
# Each fails on 518d2f3, where a pass was one transaction with the heartbeat and a 5 s lock wait:
# a row held by another session made the whole pass fail after 5 s, renewing nothing at all.


def _three_held_runs(client, pool, executors, url: str) -> tuple[Replica, list[Any]]:
    """Three long jobs of three tasks, launched by one in-process replica 'a' whose instance row
    exists, each renewed once."""
    for name in ("one", "two", "three"):
        client.trigger(shell_task(client, name, "sleep 30").id, requested_by="test")
    query(
        url,
        "INSERT INTO instance (id, hostname, pid, version, schema_revision, concurrency, "
        "lease_ttl, lease_grace, reconcile_interval) "
        "VALUES ('a', 'h', 1, 'v', '0003', 8, '3 s', '1 s', '1 s')",
    )
    replica = Replica(url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 3
    assert replica.keeper.run_once() == set()
    return replica, sorted(replica.held, key=lambda r: r.run_id)


def _leases(url: str) -> dict[int, Any]:
    return {r["id"]: r["lease_expires_at"] for r in query(url, "SELECT * FROM run ORDER BY id")}


def _heartbeat_at(url: str) -> Any:
    return query(url, "SELECT heartbeat_at FROM instance WHERE id = 'a'")[0]["heartbeat_at"]


def test_a_run_row_held_by_another_session_delays_only_its_own_renewal_and_is_not_fenced(
    client, pool, executors, database_url
) -> None:
    url = database_url
    replica, (lost, held, free) = _three_held_runs(client, pool, executors, url)
    # A peer took `lost` over (its compare-and-set), while another session holds `held`'s row.
    query(
        url,
        "UPDATE run SET status = 'interrupted', finished_at = now() WHERE id = %s RETURNING id",
        (lost.run_id,),
    )
    before, trusted = _leases(url), {r.run_id: r.trusted_until for r in (held, free)}
    with psycopg.connect(url) as holder:
        holder.execute("SELECT 1 FROM run WHERE id = %s FOR UPDATE", (held.run_id,))
        started = time.monotonic()
        with capture_logs() as logs:
            fenced = replica.keeper.run_once()
        took = time.monotonic() - started
        after = _leases(url)
        # The free run was renewed; the lost one fenced and its job stopped; the held one
        # neither: its lease, and its job's trust deadline, are as they were.
        assert fenced == {lost.run_id}
        assert after[free.run_id] > before[free.run_id]
        assert free.trusted_until > trusted[free.run_id]
        assert after[held.run_id] == before[held.run_id]
        assert held.trusted_until == trusted[held.run_id]
        assert (held.fenced, free.fenced, lost.fenced) == (False, False, True)
        assert (held.job.poll(), free.job.poll()) == (None, None)
        locked = [e for e in logs if e["event"] == "run_renewal_locked"]
        assert [e["run_id"] for e in locked] == [held.run_id]
        assert not [e for e in logs if e["event"] == "run_fenced" and e["run_id"] != lost.run_id]
        # It waited for the held row TTL/10 (0.3 s), not the 5 s the old lock wait took.
        assert took < 2.0, took
        # A second pass while still held: the same, and still nothing counted as fenced.
        assert replica.keeper.run_once() == set()
        assert _leases(url)[held.run_id] == before[held.run_id]
    # Released: the next pass renews it again.
    assert replica.keeper.run_once() == set()
    assert _leases(url)[held.run_id] > before[held.run_id]
    assert held.trusted_until > trusted[held.run_id]
    for run in (held, free):
        run.job.stop("test over")


def test_an_instance_row_held_by_another_session_skips_the_heartbeat_but_renews_every_run(
    client, pool, executors, database_url
) -> None:
    url = database_url
    replica, runs = _three_held_runs(client, pool, executors, url)
    before, beat = _leases(url), _heartbeat_at(url)
    vital = _supervised(replica.keeper, limit=1)
    with psycopg.connect(url) as holder:
        holder.execute("SELECT 1 FROM instance WHERE id = 'a' FOR UPDATE")
        with capture_logs() as logs:
            assert replica.keeper.reported_once() == set()  # a good pass, not a failed one
        after = _leases(url)
        assert all(after[r.run_id] > before[r.run_id] for r in runs)
        assert _heartbeat_at(url) == beat
        assert [e["event"] for e in logs if "heartbeat" in e["event"]] == [
            "instance_heartbeat_locked"
        ]
    assert vital.failures == 0
    replica.keeper.run_once()
    assert _heartbeat_at(url) > beat  # released: the heartbeat is written again
    for run in runs:
        run.job.stop("test over")
