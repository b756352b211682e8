"""The batched hot path: one transaction writes a batch of outcomes, and it still says per row
whether it was fenced (a lost race on one row is that row's return value; the others are
written)."""

from datetime import timedelta

from tests.support import Replica, query, shell_task

TTL, GRACE = timedelta(seconds=30), timedelta(seconds=5)


def _rows(url: str, occurrence_id: int) -> dict[str, list[dict]]:
    return {
        "occurrence": query(url, "SELECT * FROM occurrence WHERE id = %s", (occurrence_id,)),
        "run": query(url, "SELECT * FROM run WHERE occurrence_id = %s", (occurrence_id,)),
    }


def test_a_batch_completion_fences_the_run_whose_token_moved_on_and_writes_the_others(
    client, pool, executors, database_url
):
    # Would fail against a batch that wrote by id alone (river#1302: the moved-on occurrence
    # would be finished) or that rolled the whole batch back for one fenced row.
    task = shell_task(client, overlap="allow")
    for _ in range(3):
        client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 3
    runs = replica.finished()
    moved = runs[1]
    query(
        database_url,
        "UPDATE occurrence SET lease_token = lease_token + 1 WHERE id = %s RETURNING id",
        (moved.occurrence_id,),
    )
    before = _rows(database_url, moved.occurrence_id)
    result = replica.completer.run_once()
    assert (result.done, result.fenced, len(result.finished)) == (3, 1, 2)
    assert _rows(database_url, moved.occurrence_id) == before
    rows = query(database_url, "SELECT id, status FROM occurrence ORDER BY id")
    assert [r["status"] for r in rows if r["id"] != moved.occurrence_id] == ["success", "success"]
    assert len(replica.held) == 0


def test_a_batch_completion_leaves_the_occurrence_of_a_run_row_it_could_not_write(
    client, pool, executors, database_url
):
    # Would fail against a batch that settled every occurrence it had locked, whether or not
    # its run row was written: the occurrence would be finished beside a run still `running`.
    task = shell_task(client, overlap="allow")
    for _ in range(2):
        client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 2
    first, second = replica.finished()
    query(
        database_url,
        "UPDATE run SET owner = 'someone-else' WHERE id = %s RETURNING id",
        (first.run_id,),
    )
    result = replica.completer.run_once()
    assert (result.done, result.fenced) == (2, 1)
    (occ,) = query(
        database_url, "SELECT status FROM occurrence WHERE id = %s", (first.occurrence_id,)
    )
    assert occ == {"status": "running"}
    (run,) = query(database_url, "SELECT status FROM run WHERE id = %s", (second.run_id,))
    assert run == {"status": "success"}


def test_a_batch_with_two_outcomes_of_one_task_shows_the_newer_one(
    client, pool, executors, database_url
):
    # Would fail against a multi-row task update fed both rows of the task: PostgreSQL applies
    # one of them, whichever the join meets first, so the task could show the older outcome.
    task = shell_task(client, overlap="allow")
    for _ in range(2):
        client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 2
    _older, newer = sorted(replica.finished(), key=lambda r: r.occurrence_seq)
    assert replica.completer.run_once().done == 2
    (t,) = query(database_url, "SELECT last_outcome_seq, last_occurrence_id FROM task")
    assert t == {"last_outcome_seq": 2, "last_occurrence_id": newer.occurrence_id}


def test_a_batch_mixing_a_retry_and_a_final_outcome_writes_each(
    client, pool, executors, database_url
):
    retrying = shell_task(client, "retrying", command="exit 3", max_attempts=2)
    done = shell_task(client, "done", command="exit 0")
    for task in (retrying, done):
        client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 2
    replica.finished()
    result = replica.completer.run_once()
    assert (result.done, result.fenced) == (2, 0)
    rows = query(
        database_url,
        "SELECT t.name, o.status, o.attempts FROM occurrence o JOIN task t ON t.id = o.task_id "
        "ORDER BY t.name",
    )
    assert rows == [
        {"name": "done", "status": "success", "attempts": 1},
        {"name": "retrying", "status": "queued", "attempts": 1},
    ]
    runs = query(database_url, "SELECT status FROM run ORDER BY id")
    assert [r["status"] for r in runs] == ["failed", "success"]
