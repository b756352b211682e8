"""`--overlap replace` against a real database: the dispatch statement replaces a queued
predecessor (`cancelled`, reason `replaced`) and asks a running one to stop; the replacement
starts only once the predecessor's job is gone; the unique indexes refuse a second queued or
executing occurrence of a `replace` task; `audit` holds a `replace` task's runs apart and counts
a replaced firing as recorded; the value round-trips through the CLI."""

from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from scheduler_daemon.domain.task import TaskSpec
from tests.integration.test_audit import _audit, _occurrence, _run, _violations
from tests.support import Replica, query, shell_task, wait_for

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


def _now(url: str) -> datetime:
    return query(url, "SELECT now() AS t")[0]["t"]


def _rows(url: str, task_id: int) -> list[dict]:
    return query(
        url,
        "SELECT id, scheduled_for, status, reason, cancel_reason FROM occurrence "
        "WHERE task_id = %s ORDER BY occurrence_seq",
        (task_id,),
    )


def _running(client, pool, executors, url: str):
    """A `replace` task whose next firing is due now, its manual occurrence running `sleep 30`
    under replica "a"."""
    spec = TaskSpec(name="long", executor="shell", target="sleep 30", every=HOUR, overlap="replace")
    task = client.add_task(spec, now=_now(url) - HOUR - MINUTE)
    occurrence = client.trigger(task.id, requested_by="test")
    replica = Replica(url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 1
    (run,) = list(replica.held)
    return task, occurrence, replica, run


def _hourly(client, url: str, **kw):
    created = _now(url) - 3 * HOUR
    spec = TaskSpec(name="r", executor="shell", target="true", every=HOUR, overlap="replace", **kw)
    return client.add_task(spec, now=created), created


def _first_firing_queued(client, pool, executors, url: str):
    """`_hourly`'s task with its first firing queued by replica "a": (task, created, replica)."""
    task, created = _hourly(client, url)
    replica = Replica(url, pool, executors, "a")
    assert replica.dispatcher.run_once(now=created + HOUR).queued == 1
    return task, created, replica


def test_a_new_firing_cancels_the_queued_predecessor_as_replaced(
    client, pool, executors, database_url
) -> None:
    # Would fail without the dispatch's replace step: the second firing's insert would meet
    # the first, still queued, in occurrence_replace_queued_key (the pass parks the task).
    task, created, replica = _first_firing_queued(client, pool, executors, database_url)
    assert replica.dispatcher.run_once(now=created + 2 * HOUR).queued == 1
    first, second = _rows(database_url, task.id)
    assert (first["status"], first["reason"]) == ("cancelled", "replaced")
    assert (second["status"], second["reason"]) == ("queued", None)
    (t,) = query(database_url, "SELECT parked_at FROM task WHERE id = %s", (task.id,))
    assert t["parked_at"] is None


def test_a_catch_up_pass_queues_only_the_newest_firing_and_records_the_rest(
    client, pool, executors, database_url
) -> None:
    # Three firings missed: the newest is queued, the older ones recorded skipped, each a row of
    # its own: firings recorded, not missing. (`--misfire run_all` is refused with replace, as
    # with forbid: it could only skip.)
    task, created = _hourly(client, database_url)
    replica = Replica(database_url, pool, executors, "a")
    result = replica.dispatcher.run_once(now=created + 3 * HOUR + MINUTE)
    assert (result.queued, result.skipped) == (1, 2)
    rows = _rows(database_url, task.id)
    assert [r["status"] for r in rows] == ["skipped", "skipped", "queued"]
    assert [r["scheduled_for"] for r in rows] == [created + n * HOUR for n in (1, 2, 3)]


def test_a_running_predecessor_keeps_its_slot_until_its_job_is_gone(
    client, pool, executors, database_url
) -> None:
    # The race window between the dispatcher's cancel request and the owner's confirmation,
    # forced by stepping the services. Fails on the claim before sd_claim_launch_v5 (v4 picks
    # the replacement while its predecessor still runs: the claim errors on
    # occurrence_replace_executing_key, or without that index starts the two side by side).
    task, occurrence, replica, run = _running(client, pool, executors, database_url)
    assert replica.dispatcher.run_once().queued == 1  # the due firing, at the database's now
    predecessor, replacement = _rows(database_url, task.id)
    assert predecessor["id"] == occurrence.id
    assert (predecessor["status"], predecessor["cancel_reason"]) == ("running", "replaced")
    assert replacement["status"] == "queued"

    # In the window: the predecessor's job still runs, so nobody starts the replacement.
    assert replica.launcher.run_once().claimed == 0
    other = Replica(database_url, pool, executors, "b")
    assert other.launcher.run_once().claimed == 0
    assert run.job.poll() is None  # still running: the window is really open

    assert replica.keeper.run_once() == set()  # the owner hears the request and stops the job
    outcome = wait_for(run.job.poll, timeout=5, message="the replaced job to stop")
    assert outcome.status == "stopped"
    assert other.launcher.run_once().claimed == 0  # not before the owner wrote it is gone
    assert replica.completer.run_once().done == 1
    predecessor, _ = _rows(database_url, task.id)
    assert (predecessor["status"], predecessor["reason"]) == ("cancelled", "replaced")

    assert other.launcher.run_once().claimed == 1  # now the replacement starts
    _, replacement = _rows(database_url, task.id)
    assert replacement["status"] == "running"
    (gap,) = query(
        database_url,
        "SELECT (SELECT finished_at FROM run WHERE occurrence_id = %s) "
        "<= (SELECT started_at FROM run WHERE occurrence_id = %s) AS apart",
        (predecessor["id"], replacement["id"]),
    )
    assert gap["apart"]
    other.finished()


def test_a_firing_arriving_while_the_replacement_waits_replaces_the_waiting_one(
    client, pool, executors, database_url
) -> None:
    task, _, replica, run = _running(client, pool, executors, database_url)
    client.trigger(task.id, requested_by="test")  # a manual firing replaces too
    third = client.trigger(task.id, requested_by="test")
    running, waiting, newest = _rows(database_url, task.id)
    assert (running["status"], running["cancel_reason"]) == ("running", "replaced")
    assert (waiting["status"], waiting["reason"]) == ("cancelled", "replaced")
    assert (newest["id"], newest["status"]) == (third.id, "queued")
    replica.keeper.run_once()
    wait_for(run.job.poll, timeout=5, message="the replaced job to stop")
    replica.completer.run_once()


def test_the_database_refuses_a_second_queued_or_executing_occurrence_of_a_replace_task(
    client, pool, executors, database_url
) -> None:
    task, _, replica, run = _running(client, pool, executors, database_url)
    waiting = client.trigger(task.id, requested_by="test")
    # A second executing one (what the v4 claim would write): occurrence_replace_executing_key.
    with pytest.raises(psycopg.errors.UniqueViolation, match="occurrence_replace_executing_key"):
        query(database_url, "UPDATE occurrence SET status = 'running' WHERE id = %s", (waiting.id,))
    # A second queued one (a dispatch that forgot to replace): occurrence_replace_queued_key.
    with pytest.raises(psycopg.errors.UniqueViolation, match="occurrence_replace_queued_key"):
        query(
            database_url,
            "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, "
            "status, not_before, created_at, updated_at) "
            "SELECT task_id, 99, now(), 'manual', 'replace', 'queued', now(), now(), now() "
            "FROM occurrence WHERE id = %s",
            (waiting.id,),
        )
    # Other policies are not bound by them: two queued `queue` occurrences of one task are fine.
    queue = shell_task(client, "q", overlap="queue")
    client.trigger(queue.id, requested_by="test")
    client.trigger(queue.id, requested_by="test")
    replica.keeper.run_once()
    wait_for(run.job.poll, timeout=5, message="the replaced job to stop")
    replica.completer.run_once()


def test_the_overlap_checks_refuse_an_unknown_value(client, database_url) -> None:
    task = shell_task(client, "x", overlap="replace")
    with pytest.raises(psycopg.errors.CheckViolation, match="task_overlap_check"):
        query(database_url, "UPDATE task SET overlap = 'swap' WHERE id = %s", (task.id,))


def test_audit_reports_overlapping_runs_of_a_replace_task(cli, client, database_url) -> None:
    t = _now(database_url)
    task = shell_task(client, "r", overlap="replace")

    def replace_run(seq: int, start: timedelta, end: timedelta) -> int:
        occ = _occurrence(database_url, task.id, seq, overlap="replace", scheduled_for=t - start)
        return _run(database_url, occ, token=1, start=t - start, end=t - end)

    first = replace_run(1, 10 * MINUTE, 8 * MINUTE)
    second = replace_run(2, 9 * MINUTE, 7 * MINUTE)  # started before the first was gone
    replace_run(3, 7 * MINUTE, 6 * MINUTE)  # starts as the second ends: apart
    code, report = _audit(cli)
    assert code == 1
    (v,) = _violations(report)
    assert v["check"] == "runs_overlap"
    assert v["rows"] == {"scope": "task", "task_id": task.id, "run_ids": [first, second]}


def test_audit_counts_replaced_firings_as_recorded(
    cli, client, pool, executors, database_url
) -> None:
    task, created = _hourly(client, database_url)
    replica = Replica(database_url, pool, executors, "a")
    replica.dispatcher.run_once(now=created + HOUR)
    replica.dispatcher.run_once(now=created + 2 * HOUR + MINUTE)  # replaces the first
    replica.dispatcher.run_once()  # the third, replacing the second, at the database's now
    statuses = [(r["status"], r["reason"]) for r in _rows(database_url, task.id)]
    assert statuses[:2] == [("cancelled", "replaced"), ("cancelled", "replaced")]
    code, report = _audit(cli)
    assert _violations(report, "firing_missing") == []
    assert code == 0, report["violations"]


def test_replace_round_trips_through_add_update_export_apply_and_json(
    cli, db, tmp_path: Path
) -> None:
    added = cli("tasks", "add", "t", "--every", "1h", "--overlap", "replace", "--command", "true")
    assert added.code == 0, added.err
    assert cli("tasks", "show", "t", "--json").json()["overlap"] == "replace"
    exported = cli("tasks", "export").out
    assert 'overlap = "replace"' in exported
    assert cli("tasks", "update", "t", "--overlap", "queue").code == 0
    assert cli("tasks", "show", "t", "--json").json()["overlap"] == "queue"
    assert cli("tasks", "update", "t", "--overlap", "replace").code == 0
    cli("tasks", "delete", "t")
    path = tmp_path / "tasks.toml"
    path.write_text(exported)
    assert cli("tasks", "apply", "-f", str(path), "--source", "s").code == 0
    (row,) = db.execute("SELECT overlap FROM task WHERE deleted_at IS NULL").fetchall()
    assert row["overlap"] == "replace"
    many = cli("tasks", "trigger", "t", "--count", "2")
    assert (many.code, many.err.count("\n")) == (2, 1)
    assert "--overlap replace" in many.err


def test_a_dispatch_that_fails_leaves_the_predecessor_as_it_was(
    client, pool, executors, database_url
) -> None:
    # Would fail if the replace step were not undone with the failed insert: the task is parked
    # (its error kept) and its queued predecessor would be cancelled for a firing never written.
    task, created, replica = _first_firing_queued(client, pool, executors, database_url)
    query(
        database_url,
        "CREATE FUNCTION refuse_insert() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'insert refused by the test'; END $$; "
        "CREATE TRIGGER refuse BEFORE INSERT ON occurrence FOR EACH ROW "
        "EXECUTE FUNCTION refuse_insert()",
    )
    replica.dispatcher.run_once(now=created + 2 * HOUR)
    (t,) = query(database_url, "SELECT parked_at, park_error FROM task WHERE id = %s", (task.id,))
    assert t["parked_at"] is not None
    assert "insert refused by the test" in t["park_error"]
    (only,) = _rows(database_url, task.id)
    assert (only["status"], only["reason"], only["cancel_reason"]) == ("queued", None, None)
