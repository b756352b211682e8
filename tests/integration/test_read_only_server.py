"""A server that turns read-only without dropping its connections (a primary demoted, a standby
behind a stale address, `default_transaction_read_only` switched on) is an outage, not a failed
pass: the pass keeps what it could not write, the connection is dropped so the next one looks for
a server that takes writes, and supervision does not count it (issue 32, item 3)."""

import psycopg
import pytest

from scheduler_daemon.runtime.supervision import classify
from scheduler_daemon.storage.database import make_pool, transaction
from scheduler_daemon.storage.error import DatabaseUnavailable
from tests.support import launched_shell_run, query, wait_for


@pytest.fixture
def one_connection(database_url):
    """A pool of one connection, so the test knows which session it turns read-only."""
    pool = make_pool(database_url, max_size=1, name="read-only-test")
    pool.open(wait=True)
    yield pool
    pool.close()


def _turn_read_only(pool) -> int:
    """Switches the pool's one live session to read-only, as a demoted server would be; returns
    its backend pid."""
    with pool.connection() as conn:
        conn.execute("SET SESSION default_transaction_read_only = on")
        conn.commit()
        return conn.info.backend_pid


def test_a_write_refused_as_read_only_is_an_outage_and_drops_the_connection(one_connection):
    # Fails on the parent commit: the refusal escaped as ReadOnlySqlTransaction, which
    # supervision counted as a failed pass (three daemons exited 3 within 27 s, issue 32).
    pid = _turn_read_only(one_connection)
    with (
        pytest.raises(DatabaseUnavailable, match="read-only") as refused,
        transaction(one_connection) as tx,
    ):
        tx.conn.execute("CREATE TEMP TABLE t (x int)")
    assert classify(refused.value) == "outage"
    with transaction(one_connection) as tx:  # a new session: it takes writes again
        assert tx.conn.info.backend_pid != pid
        tx.conn.execute("CREATE TEMP TABLE t (x int)")


def test_a_finished_jobs_outcome_is_kept_while_the_server_is_read_only_and_written_after(
    client, one_connection, executors, database_url
):
    # Fails on the parent commit: the completer's write raised ReadOnlySqlTransaction out of
    # the pass, and the outcome was neither kept as an outage's nor written.
    _, occurrence, replica, run = launched_shell_run(
        client, one_connection, executors, database_url
    )
    wait_for(run.job.poll, message="the job to finish")
    _turn_read_only(one_connection)
    kept = replica.completer.run_once()
    assert (kept.kept, kept.done) == (1, 0)
    assert run.run_id in {held.run_id for held in replica.held}
    written = replica.completer.run_once()
    assert (written.kept, written.done) == (0, 1)
    (row,) = query(database_url, "SELECT status FROM run WHERE id = %s", (run.run_id,))
    assert row["status"] == "success"
    (occ,) = query(database_url, "SELECT status FROM occurrence WHERE id = %s", (occurrence.id,))
    assert occ["status"] == "success"


def test_a_claim_refused_as_read_only_is_an_outage(client, one_connection, executors, database_url):
    # The launcher's claim goes in one round trip (one_trip): the same rule holds there.
    from tests.support import Replica, shell_task

    task = shell_task(client)
    client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, one_connection, executors, "a")
    _turn_read_only(one_connection)
    with pytest.raises(DatabaseUnavailable):
        replica.launcher.run_once()
    assert replica.launcher.run_once().launched == 1
    with psycopg.connect(database_url) as conn:  # nothing half-written by the refused claim
        (n,) = conn.execute("SELECT count(*) FROM run").fetchone()
    assert n == 1
