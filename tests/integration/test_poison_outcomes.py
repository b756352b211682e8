"""A poison row is a row, not an outage: whatever a job returns is made storable before it
reaches SQL, and an outcome the database still refuses is isolated to its own run (written
without its output, else its task parked), so the pass, the daemon and every other run go on.

Before issue 28 (tested against 646db2b) a job printing one NUL byte failed the whole pass with
`PostgreSQL text fields cannot contain NUL (0x00) bytes`; the daemon exited 3 after
--max-failed-passes, the next replica took the run over, ran it again and failed the same way."""

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from scheduler_daemon.domain.storable import REPLACEMENT
from scheduler_daemon.domain.task import TaskSpec
from tests.support import Replica, answering, query, shell_task, wait_for

# Raises a data exception (SQLSTATE 22000) on any write of a run whose output or error carries
# the word `poison`, or of every run of the task named `refused`: what the server does to a
# value it cannot store, forced for a value the completer did not mend.
REFUSE = """
CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status <> 'running' AND (
        coalesce(NEW.output_tail, '') LIKE '%poison%' OR coalesce(NEW.error, '') LIKE '%poison%'
        OR NEW.occurrence_id IN (SELECT o.id FROM occurrence o JOIN task t ON t.id = o.task_id
                                 WHERE t.name = 'refused')) THEN
        RAISE EXCEPTION 'value refused' USING ERRCODE = '22000';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_refuse BEFORE INSERT OR UPDATE ON run FOR EACH ROW
EXECUTE FUNCTION test_refuse();
"""


def _finish_all(replica: Replica) -> None:
    """Waits until every held job ended, without taking their outcomes (the completer does)."""
    for run in list(replica.held):
        wait_for(run.job.poll, message=f"run {run.run_id} to finish")


def _launch(client: Any, pool: Any, executors: Any, url: str, *specs: TaskSpec) -> Replica:
    for spec in specs:
        client.trigger(client.add_task(spec).id, requested_by="test")
    replica = Replica(url, pool, executors, "a")
    assert replica.launcher.run_once().launched == len(specs)
    _finish_all(replica)
    return replica


def _runs_by_task(url: str) -> dict[str, dict[str, Any]]:
    """Each task's (one) run by task name: its status, output and error, its occurrence's status
    and whether the task is parked, with the error it was parked with."""
    rows = query(
        url,
        "SELECT t.name, r.status, r.output_tail, r.error, o.status AS occ,"
        " t.parked_at IS NOT NULL AS parked, t.park_error FROM run r"
        " JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id",
    )
    return {row["name"]: row for row in rows}


def _shell(name: str, command: str) -> TaskSpec:
    return TaskSpec(name=name, executor="shell", target=command, every=timedelta(hours=1))


@pytest.fixture
def http_nul() -> Iterator[str]:
    """A receiver answering every POST with a body that holds a NUL byte."""
    with answering(b"a\x00b") as url:
        yield url


def test_output_and_errors_with_nul_bytes_are_recorded_with_the_nul_replaced(
    client, pool, executors, database_url, http_nul
) -> None:
    # Failed on 646db2b: the batch's statement raised DataError and the pass failed.
    replica = _launch(
        client,
        pool,
        executors,
        database_url,
        _shell("shell", r"printf 'a\000b'"),
        _shell("shell-error", r"printf 'x\000y' >&2; exit 3"),
        TaskSpec(name="py", executor="python", target="tests.jobs:nul", every=timedelta(hours=1)),
        TaskSpec(name="http", executor="http", target=http_nul, every=timedelta(hours=1)),
    )
    result = replica.completer.run_once()
    assert (result.done, result.unstorable) == (4, 0)
    rows = _runs_by_task(database_url)
    assert rows["shell"]["status"] == "success"
    assert rows["shell"]["output_tail"] == f"a{REPLACEMENT}b"
    assert rows["shell-error"]["status"] == "failed"
    assert f"x{REPLACEMENT}y" in rows["shell-error"]["output_tail"]
    assert rows["py"]["status"] == "failed"
    assert f"nul{REPLACEMENT}here" in rows["py"]["error"]
    assert rows["http"]["status"] == "success"
    assert rows["http"]["output_tail"] == f"a{REPLACEMENT}b"


def _refused_pass(db: Any, client: Any, pool: Any, executors: Any, url: str, *, tasks: Any) -> Any:
    """With REFUSE installed, `tasks` launched (`_launch`) and one completer pass run:
    (the replica, the pass's result)."""
    db.execute(REFUSE)
    replica = _launch(client, pool, executors, url, *tasks)
    return replica, replica.completer.run_once()


def test_a_refused_outcome_in_a_batch_is_written_without_its_output_and_the_others_in_full(
    client, pool, executors, database_url, db
) -> None:
    # Forced: the server refuses the poison run's output (a trigger), so the batch of successes
    # fails as a whole. Without the unit-by-unit fallback and the output-dropping retry, the
    # pass fails and neither outcome is written.
    tasks = (_shell("poison", "echo poison"), _shell("clean", "echo clean"))
    replica, result = _refused_pass(db, client, pool, executors, database_url, tasks=tasks)
    assert (result.done, result.unstorable, len(replica.held)) == (2, 1, 0)
    rows = _runs_by_task(database_url)
    assert {k: rows["clean"][k] for k in ("name", "status", "output_tail", "error", "occ")} == {
        "name": "clean",
        "status": "success",
        "output_tail": "clean\n",
        "error": None,
        "occ": "success",
    }
    assert rows["poison"]["status"] == "success"
    assert rows["poison"]["occ"] == "success"
    assert rows["poison"]["output_tail"] is None
    assert rows["poison"]["error"] == "outcome not storable: SQLSTATE 22000"
    (t,) = query(database_url, "SELECT parked_at FROM task WHERE name = 'poison'")
    assert t["parked_at"] is None  # written: nothing to park


def test_an_outcome_refused_even_without_its_output_parks_its_task_and_the_pass_goes_on(
    client, pool, executors, database_url, db
) -> None:
    # Forced: every write of the `refused` task's run is refused. The pass must still record
    # the other task's outcome, park `refused` with the error (shown by `status`), and drop the
    # run from the held set, leaving it to the takeover.
    tasks = (_shell("refused", "exit 3"), _shell("fine", "exit 4"))
    replica, result = _refused_pass(db, client, pool, executors, database_url, tasks=tasks)
    assert result.unstorable == 1
    assert len(replica.held) == 0
    (fine,) = query(database_url, "SELECT status FROM run WHERE error = 'exit code 4'")
    assert fine["status"] == "failed"
    refused = _runs_by_task(database_url)["refused"]
    assert {k: refused[k] for k in ("status", "parked", "park_error")} == {
        "status": "running",  # left to the takeover
        "parked": True,
        "park_error": "outcome not storable: SQLSTATE 22000",
    }
    assert [p["name"] for p in client.status()["parked_tasks"]] == ["refused"]


def test_a_task_whose_dispatch_write_is_too_big_for_an_index_is_parked_and_others_fire(
    client, pool, executors, database_url, db
) -> None:
    # A concurrency key beyond the btree row limit, written by hand (as an older build or SQL
    # could): on 646db2b the dispatch raised ProgramLimitExceeded (54000), an OperationalError
    # the dispatcher re-raised, and every pass failed.
    big = shell_task(client, "big", concurrency_key="k")
    shell_task(client, "small")
    db.execute(
        "UPDATE task SET concurrency_key = %s, next_run_at = now() - interval '1 s'",
        ("".join(chr(0x4E00 + i % 20000) for i in range(8000)),),
    )
    db.execute("UPDATE task SET concurrency_key = NULL WHERE name = 'small'")
    replica = Replica(database_url, pool, executors, "a")
    result = replica.dispatcher.run_once()
    assert result.queued == 1
    (parked,) = query(database_url, "SELECT id, park_error FROM task WHERE parked_at IS NOT NULL")
    assert parked["id"] == big.id
    assert "index row" in parked["park_error"]
