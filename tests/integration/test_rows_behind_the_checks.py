"""Task rows written behind the checks at entry (by SQL, the operator role's or an older build's)
fail no pass of the completer, the reconciler or the dispatcher: what cannot be read about one
row is that row's outcome, and the pass goes on (issue 44, KNOWN-FAILURES 39-40).

On 61278d7 each test here raised out of its pass: the task reads decoded the payload's jsonb
while psycopg fetched it (RecursionError at ~1,000 levels) or read its keys as given (TypeError
for a payload that is no object), and the reconciler ran a fix that raised without a guard."""

from typing import Any

import pytest
import structlog

from scheduler_daemon.services import reconciler as reconciler_module
from scheduler_daemon.services.completer import Completer
from tests.support import (
    EVERY_MINUTE,
    Replica,
    launched_shell_run,
    make_reconciler,
    query,
    shell_task,
    wait_for,
)

DEEP = "(repeat('[', 1000) || repeat(']', 1000))::jsonb"
# Payloads the daemon cannot read: one nested past any decoder, one that is no object, one whose
# headers are no object.
UNREADABLE = {
    "deep": f"jsonb_build_object('command', 'exit 3', 'x', {DEEP})",
    "array": "'[\"exit 3\"]'::jsonb",
    "headers": '\'{"command": "exit 3", "headers": [1]}\'::jsonb',
}


@pytest.mark.parametrize("payload", sorted(UNREADABLE))
def test_a_run_whose_task_payload_became_unreadable_still_has_its_outcome_written(
    client, pool, executors, database_url, payload: str
) -> None:
    # The completer locks the task for its policy (attempts, backoff), never for what it runs.
    task, _occurrence, replica, run = launched_shell_run(
        client, pool, executors, database_url, command="exit 3"
    )
    query(
        database_url, f"UPDATE task SET payload = {UNREADABLE[payload]} WHERE id = %s", (task.id,)
    )
    wait_for(run.job.poll, message="the job to end")
    result = replica.completer.run_once()
    assert (result.done, result.unstorable) == (1, 0)
    (row,) = query(
        database_url,
        "SELECT r.status, r.error, o.status AS occ FROM run r"
        " JOIN occurrence o ON o.id = r.occurrence_id",
    )
    assert row == {"status": "failed", "error": "exit code 3", "occ": "failed"}


def _launched(client: Any, pool: Any, executors: Any, url: str, **commands: str) -> Any:
    """One hourly shell task per name in `commands` (running its command), each triggered
    once, all launched by one replica "a": (the tasks in that order, the replica)."""
    tasks = [shell_task(client, name, command=command) for name, command in commands.items()]
    for task in tasks:
        client.trigger(task.id, requested_by="test")
    replica = Replica(url, pool, executors, "a")
    assert replica.launcher.run_once().launched == len(tasks)
    return tasks, replica


def test_a_takeover_of_a_run_whose_task_payload_became_unreadable_ends_it(
    client, pool, executors, database_url
) -> None:
    task, _occurrence, _replica, run = launched_shell_run(
        client, pool, executors, database_url, command="sleep 30"
    )
    query(database_url, f"UPDATE task SET payload = {UNREADABLE['deep']} WHERE id = %s", (task.id,))
    query(
        database_url,
        "UPDATE run SET lease_expires_at = now() - interval '2 s',"
        " takeover_at = now() - interval '1 s'",
    )
    report = make_reconciler(pool).run_once()
    assert report.ids["taken_over"] == [run.run_id]
    (row,) = query(database_url, "SELECT status FROM run")
    assert row["status"] == "interrupted"
    run.job.stop("test over")


def test_a_pause_ending_on_a_task_whose_cron_does_not_parse_parks_it_and_the_others_resume(
    cli, pool, database_url
) -> None:
    # The resume plans the next firing from the schedule: a cron written by SQL that does not
    # parse raised out of the pass on 61278d7, every pass, and no other pause ended.
    for name in ("bad", "good"):
        cli("tasks", "add", name, *EVERY_MINUTE)
        assert cli("tasks", "pause", name, "--until", "1h").code == 0
    query(database_url, "UPDATE task SET paused_until = now() - interval '1 s'")
    query(database_url, "UPDATE task SET cron_expr = 'not a cron' WHERE name = 'bad'")
    with structlog.testing.capture_logs() as logs:
        report = make_reconciler(pool).run_once()
    rows = {
        r["name"]: r for r in query(database_url, "SELECT id, name, paused, park_error FROM task")
    }
    assert report.ids["resumed_tasks"] == [rows["good"]["id"]]
    assert rows["good"]["paused"] is False
    assert rows["bad"]["park_error"].startswith("reconcile resumed_tasks failed: ")
    (parked,) = [e for e in logs if e["event"] == "task_parked"]
    assert parked["task_id"] == rows["bad"]["id"]
    with structlog.testing.capture_logs() as logs:  # said once: a later pass parks nothing
        make_reconciler(pool).run_once()
    assert [e for e in logs if e["log_level"] == "error"] == []


def test_a_due_task_whose_payload_nests_too_deep_is_parked_and_the_others_fire(
    client, pool, executors, database_url, cli
) -> None:
    # The due scan read the payload's jsonb through psycopg's decoder: RecursionError out of
    # the dispatcher's pass on 61278d7, every pass, and no task fired.
    for name in ("deep", "good"):
        cli("tasks", "add", name, *EVERY_MINUTE)
    query(
        database_url,
        f"UPDATE task SET payload = {UNREADABLE['deep']} WHERE name = 'deep';"
        "UPDATE task SET next_run_at = now() - interval '1 s'",
    )
    replica = Replica(database_url, pool, executors, "a")
    result = replica.dispatcher.run_once()
    assert result.queued == 1
    rows = {r["name"]: r for r in query(database_url, "SELECT name, park_error FROM task")}
    assert rows["good"]["park_error"] is None
    assert rows["deep"]["park_error"] == (
        "payload unreadable: JSON nested 1001 levels deep; at most 64"
    )


def test_a_completion_that_raises_about_its_row_parks_its_task_and_the_others_are_written(
    client, pool, executors, database_url, monkeypatch
) -> None:
    # Forced: deciding the outcome of the `poison` task's run raises (the injection stands for
    # any value this build's code cannot take). On 61278d7 the error left the batch and the
    # pass: neither outcome was written, every pass. Now the batch goes unit by unit, the
    # poison's task is parked with the error and its run left to the takeover; `fine` is written.
    commands = {"poison": "exit 3", "fine": "exit 4"}
    (poison, _), replica = _launched(client, pool, executors, database_url, **commands)
    for run in list(replica.held):
        wait_for(run.job.poll, message="the jobs to end")
    decide = Completer._decide

    def refusing(self: Completer, run: Any, occ: Any, spec: Any) -> Any:
        if run.task_id == poison.id:
            raise ValueError("a value this build cannot take")
        return decide(self, run, occ, spec)

    monkeypatch.setattr(Completer, "_decide", refusing)
    result = replica.completer.run_once()
    assert (result.done, result.unstorable, len(replica.held)) == (2, 1, 0)
    rows = {r["name"]: r for r in query(database_url, "SELECT name, park_error FROM task")}
    assert rows["poison"]["park_error"] == "outcome not recordable: a value this build cannot take"
    assert rows["fine"]["park_error"] is None
    runs = query(database_url, "SELECT status, error FROM run ORDER BY id")
    assert runs == [
        {"status": "running", "error": None},
        {"status": "failed", "error": "exit code 4"},
    ]


def test_a_takeover_that_raises_about_its_row_parks_its_task_and_the_others_are_taken_over(
    client, pool, executors, database_url, monkeypatch
) -> None:
    # Forced: the takeover's decision raises for the `poison` task's run. On 61278d7 the error
    # left the reconcile pass (every pass), and no other orphan was taken over.
    commands = {"poison": "sleep 30", "other": "sleep 30"}
    (poison, other), replica = _launched(client, pool, executors, database_url, **commands)
    query(
        database_url,
        "UPDATE run SET lease_expires_at = now() - interval '2 s',"
        " takeover_at = now() - interval '1 s'",
    )
    decide = reconciler_module.decide

    def refusing(*args: Any, **kw: Any) -> Any:
        if kw["attempts"] == 1 and kw["max_attempts"] == 7:
            raise ValueError("a value this build cannot take")
        return decide(*args, **kw)

    query(database_url, "UPDATE task SET max_attempts = 7 WHERE id = %s", (poison.id,))
    monkeypatch.setattr(reconciler_module, "decide", refusing)
    report = make_reconciler(pool).run_once()
    runs = {
        r["task_id"]: r
        for r in query(
            database_url,
            "SELECT o.task_id, r.id, r.status"
            " FROM run r JOIN occurrence o ON o.id = r.occurrence_id",
        )
    }
    assert report.ids["taken_over"] == [runs[other.id]["id"]]
    assert runs[poison.id]["status"] == "running"  # rolled back: a later pass tries again
    (parked,) = query(database_url, "SELECT id, park_error FROM task WHERE parked_at IS NOT NULL")
    assert parked == {
        "id": poison.id,
        "park_error": "reconcile taken_over failed: a value this build cannot take",
    }
    for run in list(replica.held):
        run.job.stop("test over")


def test_a_replace_task_whose_predecessor_has_arguments_too_deep_still_replaces_it(
    client, pool, executors, database_url
) -> None:
    # The new firing cancels the queued predecessor and read it back with its arguments: on
    # 61278d7 RecursionError parked the task (`maximum recursion depth exceeded`) and it never
    # fired again until an operator's update.
    task = shell_task(client, "replacing", overlap="replace")
    occurrence = client.trigger(task.id, requested_by="test")
    deep = "(repeat('{\"a\": ', 1000) || '1' || repeat('}', 1000))::jsonb"
    query(database_url, f"UPDATE occurrence SET args = {deep} WHERE id = %s", (occurrence.id,))
    query(database_url, "UPDATE task SET next_run_at = now() - interval '1 s'")
    result = Replica(database_url, pool, executors, "a").dispatcher.run_once()
    assert result.queued == 1
    (row,) = query(database_url, "SELECT park_error FROM task")
    assert row["park_error"] is None
    (replaced,) = query(
        database_url, "SELECT status, reason FROM occurrence WHERE id = %s", (occurrence.id,)
    )
    assert replaced == {"status": "cancelled", "reason": "replaced"}
