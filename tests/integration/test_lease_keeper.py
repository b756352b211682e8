"""The lease keeper against a real database: a renewal after a takeover is fenced and stops
the job; an instance removed by a peer registers again."""

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
