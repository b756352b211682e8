"""Firings are never dropped without a row: a task the dispatcher cannot plan is parked (and
its missed firings recorded when it is fixed), and pause, reschedule, delete and resume never
move a task past due firings silently (guarantee 1)."""

from datetime import timedelta

import structlog

from scheduler_daemon.domain.task import TaskSpec
from tests.support import Replica, query


def _hourly(client, database_url, name: str, hours_ago: float = 2.5, **kw):
    (now,) = query(database_url, "SELECT now() AS t")
    created = now["t"] - timedelta(hours=hours_ago)
    task = client.add_task(
        TaskSpec(name=name, executor="shell", target="true", every=timedelta(hours=1), **kw),
        now=created,
    )
    return task, now["t"]


def _poison(database_url: str, task_id: int) -> None:
    # Written behind the validation's back (or by a build with other rules): unplannable.
    query(
        database_url,
        "UPDATE task SET cron_expr = 'not a cron', every = NULL, "
        "schedule_kind = 'cron' WHERE id = %s",
        (task_id,),
    )


def test_an_unplannable_task_is_parked_once_and_costs_nothing_after(
    client, pool, executors, database_url, cli
) -> None:
    # Would fail against the dispatcher that only skipped the bad row in a savepoint: a batch
    # made only of such rows (they sort first) ended the pass before the good task was reached,
    # and every pass logged the error again.
    poisoned = [_hourly(client, database_url, f"poison-{i}", hours_ago=3)[0] for i in range(3)]
    for task in poisoned:
        _poison(database_url, task.id)
    good, now = _hourly(client, database_url, "good", hours_ago=1.5)
    replica = Replica(database_url, pool, executors, "a")
    replica.dispatcher.batch = 2  # the poisoned rows fill the first batches
    with structlog.testing.capture_logs() as logs:
        result = replica.dispatcher.run_once()
    assert result.queued == 1
    assert {o["task_id"] for o in query(database_url, "SELECT task_id FROM occurrence")} == {
        good.id
    }
    assert sorted(e["task_id"] for e in logs if e["event"] == "task_parked") == sorted(
        t.id for t in poisoned
    )
    with structlog.testing.capture_logs() as logs:
        again = replica.dispatcher.run_once()
    assert [e for e in logs if e["log_level"] == "error"] == []
    assert again.next_due == client.get_task(good.id).next_run_at  # the loop does not spin

    shown = cli("tasks", "show", "poison-0", "--json").json()
    assert shown["parked_at"] is not None
    assert shown["park_error"]
    status = cli("status", "--json").json()
    assert [t["name"] for t in status["parked_tasks"]] == ["poison-0", "poison-1", "poison-2"]

    fixed = cli("tasks", "update", "poison-0", "--cron", "0 * * * *")
    assert fixed.code == 0, fixed.err
    task = client.get_task("poison-0")
    assert (task.parked_at, task.park_error) == (None, None)
    assert task.next_run_at > now
    (missed,) = query(
        database_url,
        "SELECT status, reason, firing_count FROM occurrence WHERE task_id = %s",
        (task.id,),
    )
    assert missed == {"status": "skipped", "reason": "parked", "firing_count": 3}


def test_a_task_whose_writes_the_database_refuses_is_parked_and_the_batch_goes_on(
    client, pool, executors, database_url
) -> None:
    # The injection point is a trigger that refuses the poison's occurrence insert, so the
    # error comes from the server in the middle of the dispatch transaction. Would fail against
    # a dispatch that sent a task's writes without a savepoint of their own (or did not roll
    # back to it): the transaction is aborted, parking fails, and the good task in the same
    # batch never fires.
    poison, _ = _hourly(client, database_url, "refused", hours_ago=3)  # sorts first: older
    good, _ = _hourly(client, database_url, "good", hours_ago=1.5)
    query(
        database_url,
        f"""
        CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.task_id = {poison.id} THEN RAISE EXCEPTION 'refused by the test'; END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER refuse_poison BEFORE INSERT ON occurrence
            FOR EACH ROW EXECUTE FUNCTION refuse_poison()""",
    )
    replica = Replica(database_url, pool, executors, "a")
    with structlog.testing.capture_logs() as logs:
        result = replica.dispatcher.run_once()
    assert result.queued == 1
    assert [o["task_id"] for o in query(database_url, "SELECT task_id FROM occurrence")] == [
        good.id
    ]
    (parked,) = [e for e in logs if e["event"] == "task_parked"]
    assert (parked["task_id"], parked["error"]) == (poison.id, "refused by the test")
    (row,) = query(
        database_url,
        "SELECT parked_at, occurrence_seq FROM task WHERE id = %s",
        (poison.id,),
    )
    assert row["parked_at"] is not None
    assert row["occurrence_seq"] == 0  # its rolled-back writes left nothing behind


def test_resume_on_a_task_that_is_not_paused_keeps_its_due_firings(
    client, pool, executors, database_url
) -> None:
    # Would fail against the resume that recomputed next_run_at from now for any task: the
    # two due firings (the daemons were down) vanished without a row.
    task, _ = _hourly(client, database_url, "t")
    assert client.resume(task.id).next_run_at == task.next_run_at
    replica = Replica(database_url, pool, executors, "a")
    replica.dispatcher.run_once()
    rows = query(database_url, "SELECT firing_count FROM occurrence")
    assert sum(r["firing_count"] for r in rows) == 2


def test_pause_reschedule_and_delete_record_the_due_firings_they_pass_over(
    client, database_url
) -> None:
    for name, change, reason in (
        ("paused", lambda t: client.pause(t.id), "paused"),
        (
            "rescheduled",
            lambda t: client.update_task(t.id, every=timedelta(minutes=30)),
            "rescheduled",
        ),
        ("deleted", lambda t: client.delete(t.id, requested_by="test"), "deleted"),
    ):
        task, _ = _hourly(client, database_url, name)
        change(task)
        rows = query(
            database_url,
            "SELECT status, reason, firing_count FROM occurrence WHERE task_id = %s",
            (task.id,),
        )
        assert rows == [{"status": "skipped", "reason": reason, "firing_count": 2}], name
    resumed = client.resume("paused")
    assert resumed.next_run_at is not None
    assert query(database_url, "SELECT count(*) AS n FROM occurrence")[0]["n"] == 3
