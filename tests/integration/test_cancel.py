"""Ending a running occurrence from outside (`runs cancel`, `tasks delete --force`) keeps its
slot — `forbid`, concurrency key, budget — until its owner confirms the job is gone, or its
takeover point passes when the owner is dead (KNOWN-FAILURES 27)."""

from tests.support import launched_shell_run, make_reconciler, query, shell_task, wait_for


def test_a_cancelled_running_job_keeps_its_slot_until_its_owner_confirms_it_is_gone(
    client, pool, executors, database_url
) -> None:
    # Would fail against the cancel that ended the occurrence at once: the second trigger below
    # would be queued and could start beside the job that is still running. The window is
    # forced by stepping the services: cancel, then trigger, renew and complete one by one.
    task, occurrence, replica, run = launched_shell_run(
        client, pool, executors, database_url, name="long", command="sleep 30", concurrency_key="k"
    )
    keyed = shell_task(client, "same-key", "true", concurrency_key="k", overlap="allow")
    result = client.cancel(run.run_id, requested_by="operator")
    assert result.cancel == "requested"
    (occ,) = query(database_url, "SELECT * FROM occurrence WHERE id = %s", (occurrence.id,))
    assert (occ["status"], occ["cancel_reason"]) == ("running", "cancelled by operator")
    assert occ["cancel_requested_at"] is not None

    # The slot is held: forbid skips a new firing, the key blocks a sibling, the budget counts it.
    assert client.trigger(task.id, requested_by="test").reason == "overlap"
    client.trigger(keyed.id, requested_by="test")
    assert replica.launcher.run_once().claimed == 0
    assert client.status()["executing_runs"] == 1
    (listed,) = [r for r in client.list_runs(task="long") if r.id == run.run_id]
    assert listed.status == "running"
    assert listed.cancel_requested_at is not None

    assert replica.keeper.run_once() == set()  # renewed, not fenced: the owner is alive
    outcome = wait_for(run.job.poll, timeout=5, message="the cancelled job to stop")
    assert outcome.status == "stopped"
    assert (
        query(database_url, "SELECT status FROM occurrence WHERE id = %s", (occurrence.id,))[0][
            "status"
        ]
        == "running"
    )  # not before the owner wrote that the job is gone
    assert replica.completer.run_once().done == 1

    (occ,) = query(database_url, "SELECT * FROM occurrence WHERE id = %s", (occurrence.id,))
    (row,) = query(database_url, "SELECT * FROM run WHERE id = %s", (run.run_id,))
    assert (occ["status"], occ["reason"]) == ("cancelled", "cancelled by operator")
    assert row["status"] == "cancelled"
    assert row["finished_at"] > occ["cancel_requested_at"]  # when confirmed, not when asked
    # A recurring task's outcome is read from its occurrences (issue 45: its last_* stay empty).
    assert client.get_task(task.id).last_status == "cancelled"
    assert replica.launcher.run_once().claimed == 1  # the key's sibling may start now
    replica.finished()


def test_a_cancel_whose_owner_is_dead_ends_at_the_takeover_point_not_in_the_queue(
    client, pool, executors, database_url
) -> None:
    _, occurrence, _replica, run = launched_shell_run(
        client, pool, executors, database_url, name="long", command="sleep 30"
    )
    client.cancel(occurrence.id, occurrence=True, requested_by="operator")
    reconciler = make_reconciler(pool, "r")
    assert reconciler.run_once().counts["taken_over"] == 0  # inside its lease: the slot holds
    # The owner stopped renewing (it is dead): its takeover point passes.
    query(
        database_url,
        "UPDATE run SET lease_expires_at = now() - interval '2 s', "
        "takeover_at = now() - interval '1 s' RETURNING id",
    )
    assert reconciler.run_once().counts["taken_over"] == 1
    (occ,) = query(database_url, "SELECT status, reason FROM occurrence")
    assert occ == {"status": "cancelled", "reason": "cancelled by operator"}  # not re-queued
    run.job.stop("test over")


def test_tasks_delete_force_requests_the_cancel_of_a_running_job_and_records_its_end(
    client, pool, executors, database_url, cli
) -> None:
    _task, occurrence, replica, run = launched_shell_run(
        client, pool, executors, database_url, name="long", command="sleep 30"
    )
    done = cli("tasks", "delete", "long", "--force", "--json")
    assert done.code == 0, done.err
    assert done.json()["cancel_requested_occurrence_ids"] == [occurrence.id]
    (occ,) = query(database_url, "SELECT status FROM occurrence")
    assert occ["status"] == "running"  # the forbid slot and the budget slot are still held
    replica.keeper.run_once()
    wait_for(run.job.poll, timeout=5, message="the job of the deleted task to stop")
    assert (
        replica.completer.run_once().done == 1
    )  # the deleted task's row is still locked and written
    (occ,) = query(database_url, "SELECT status, reason FROM occurrence")
    assert occ == {"status": "cancelled", "reason": "task deleted"}


def test_runs_cancel_says_what_it_did(client, pool, executors, database_url, cli) -> None:
    _, _, _replica, run = launched_shell_run(
        client, pool, executors, database_url, name="long", command="sleep 30"
    )
    query(
        database_url,
        "INSERT INTO instance (id, hostname, pid, version, schema_revision, concurrency, "
        "lease_ttl, lease_grace, reconcile_interval) "
        "VALUES ('a', 'h', 1, 'v', '0003', 4, '3 s', '1 s', '1 s')",
    )
    said = cli("runs", "cancel", str(run.run_id))
    assert said.code == 0, said.err
    assert "cancel requested; the job is stopped within 2 s" in said.out
    shown = cli("runs", "show", str(run.run_id), "--json").json()
    assert shown["status"] == "running"
    assert shown["cancel_requested_at"] is not None
    assert "running (cancel requested)" in cli("runs", "list").out
    again = cli("runs", "cancel", str(run.run_id), "--json").json()  # idempotent request
    assert again["cancel"] == "requested"
    run.job.stop("test over")
    queued = client.trigger(shell_task(client, "q", "true").id, requested_by="test")
    said = cli("runs", "cancel", str(queued.id), "--occurrence")
    assert said.out.strip() == f"occurrence {queued.id} cancelled"
