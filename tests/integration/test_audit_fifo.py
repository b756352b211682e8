"""`audit`'s per-key order is judged by what each claim could see, not by timestamps.

An occurrence's `created_at` is its writer's transaction start; one whose transaction stays open
(a frozen or slow dispatcher) commits later than its `created_at` says. The window is forced: the
older occurrence's transaction is held open while a younger one of its key is claimed by the real
claim statement, then committed.
"""

from datetime import timedelta

import psycopg

from tests.support import Replica, query, shell_task

INSERT = """
INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap,
    concurrency_key, status, not_before, created_at, updated_at)
SELECT id, 1, now() - interval '1 minute', 'manual', 'allow', 'k', 'queued', now(), now(), now()
FROM task WHERE id = %s RETURNING id"""


def test_an_older_occurrence_committed_after_a_younger_ones_claim_did_not_wait_in_line(
    cli, client, pool, executors, database_url
) -> None:
    # Would fail against the audit rule "x.created_at < y.created_at means x was queued first"
    # (the soak's false finding on seed 11): x's created_at is earlier, but x was invisible
    # to y's claim.
    older_task, younger_task, latest_task = (
        shell_task(client, n, "sleep 0.1", concurrency_key="k", overlap="allow")
        for n in ("x", "y", "z")
    )
    with psycopg.connect(database_url) as held:
        (older_id,) = held.execute(INSERT, (older_task.id,)).fetchone()
        younger = client.trigger(younger_task.id, requested_by="test")
        replica = Replica(database_url, pool, executors, "a")
        assert replica.launcher.run_once().launched == 1  # y: x is not visible yet
        held.commit()
    (x,) = query(database_url, "SELECT created_at FROM occurrence WHERE id = %s", (older_id,))
    (y,) = query(database_url, "SELECT created_at FROM occurrence WHERE id = %s", (younger.id,))
    assert x["created_at"] < y["created_at"]  # what the timestamp rule would have misread

    clean = cli("audit", "--check", "fifo_order", "--json")
    assert clean.code == 0, clean.out

    # A claim that did see x queued and still started a younger one is a real violation:
    # planted by hand, as a claim that ignored the waiting one would have written it.
    replica.finished()
    assert replica.completer.run_once().done == 1
    latest = client.trigger(latest_task.id, requested_by="test")
    query(
        database_url,
        """UPDATE occurrence SET status = 'running', attempts = 1,
               first_claim_snapshot = pg_current_snapshot() WHERE id = %s""",
        (latest.id,),
    )
    query(
        database_url,
        """INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at,
               takeover_at, started_at, build_revision)
           VALUES (%s, 1, 'planted', 1, now() + %s, now() + %s, clock_timestamp(), 'planted')""",
        (latest.id, timedelta(seconds=10), timedelta(seconds=20)),
    )
    found = cli("audit", "--check", "fifo_order", "--json")
    assert found.code == 1
    assert [
        (v["rows"]["occurrence_id"], v["rows"]["waiting_occurrence_id"])
        for v in found.json()["violations"]
    ] == [(latest.id, older_id)]
