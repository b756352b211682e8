"""The notification outbox against a real database: a failed, timed-out, skipped or expired
firing of a task with a notify URL owes one row per (occurrence, event), written in the
transaction that records the outcome, and nothing else writes one."""

from datetime import datetime, timedelta
from typing import Any

import pytest

from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.services.deliverer import Deliverer
from scheduler_daemon.services.pruner import Pruner
from scheduler_daemon.storage import outbox_store
from scheduler_daemon.storage.database import transaction
from tests.support import Replica, launched_shell_run, make_reconciler, query, shell_task

URL = "http://127.0.0.1:9/hook"


def _notify(url: str, task_id: int, notify_url: str | None, notify_on: list[str] | None) -> None:
    """Sets a task's notification fields as the task write will (no CLI for them yet)."""
    query(
        url,
        "UPDATE task SET notify_url = %s, notify_on = %s WHERE id = %s RETURNING id",
        (notify_url, notify_on, task_id),
    )


def _outbox(url: str) -> list[dict[str, Any]]:
    return query(
        url,
        "SELECT occurrence_id, task_id, event, payload, attempts, delivered_at, delivery_id"
        " FROM notification_outbox ORDER BY id",
    )


def _completed(
    client: Any,
    pool: Any,
    executors: Any,
    url: str,
    *,
    command: str = "exit 1",
    events: list[str] | None = None,
) -> tuple[Any, Any, str]:
    """A launched shell run of `command` whose task is notified of `events` at URL, run to its
    end and completed: (the launched_shell_run, its run, what the completer answered)."""
    launched = launched_shell_run(client, pool, executors, url, command=command)
    _notify(url, launched.task.id, URL, events)
    (run,) = launched.replica.finished()
    return launched, run, launched.replica.completer.complete(run)


def _notified(client: Any, url: str, events: list[str] | None, **kw: Any) -> Any:
    """An hourly shell task "job" (support.shell_task, `kw` passed on) notified of `events`."""
    task = shell_task(client, **kw)
    _notify(url, task.id, URL, events)
    return task


def _scheduled_two_minutes_ago(url: str, ids: list[int] | None = None) -> None:
    """Moves the firings `ids` (all without) two minutes into the past, on the database clock."""
    query(
        url,
        "UPDATE occurrence SET scheduled_for = now() - interval '2 minutes'"
        " WHERE %(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s) RETURNING id",
        {"ids": ids},
    )


def test_a_final_failure_owes_one_notification_carrying_the_firing_and_its_ids(
    client, pool, executors, database_url
) -> None:
    launched, run, outcome = _completed(client, pool, executors, database_url, command="exit 3")
    assert outcome == "recorded"
    (row,) = _outbox(database_url)
    (occ,) = query(database_url, "SELECT id, scheduled_for, attempts FROM occurrence")
    assert (row["occurrence_id"], row["task_id"], row["event"]) == (
        occ["id"],
        launched.task.id,
        "failure",
    )
    payload = row["payload"]
    assert payload["event"] == "failure"
    assert payload["outcome"] == "failed"
    assert (payload["task"], payload["task_id"], payload["occurrence_id"]) == (
        "job",
        launched.task.id,
        occ["id"],
    )
    assert (payload["run_id"], payload["attempt"]) == (run.run_id, 1)
    assert payload["scheduled_for"] is not None
    assert "exit" in payload["reason"]
    assert (row["attempts"], row["delivered_at"]) == (0, None)


def test_a_batch_of_outcomes_writes_the_notifications_of_its_failures_only(
    client, pool, executors, database_url
) -> None:
    """The batch path (settle_many): one failure and one success in one pass; the success owes
    nothing, the failure one row."""
    bad = client.add_task(
        TaskSpec(name="bad", executor="shell", target="exit 1", every=timedelta(hours=1))
    )
    good = client.add_task(
        TaskSpec(name="good", executor="shell", target="true", every=timedelta(hours=1))
    )
    for task in (bad, good):
        _notify(database_url, task.id, URL, ["failure", "timeout"])
        client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 2
    replica.finished()
    assert replica.completer.run_once().done == 2
    assert [(r["task_id"], r["event"]) for r in _outbox(database_url)] == [(bad.id, "failure")]


def test_an_attempt_that_will_be_retried_owes_nothing_and_the_fleet_default_url_serves(
    client, pool, executors, database_url
) -> None:
    launched = launched_shell_run(
        client, pool, executors, database_url, command="exit 1", max_attempts=2
    )
    query(
        database_url,
        "INSERT INTO fleet_setting (key, value, updated_by) VALUES ('notify_url', %s, 'test')"
        " RETURNING key",
        (f'"{URL}"',),
    )
    (run,) = launched.replica.finished()
    assert launched.replica.completer.complete(run) == "retry"
    assert _outbox(database_url) == []
    query(database_url, "UPDATE occurrence SET not_before = now() RETURNING id")
    assert launched.replica.launcher.run_once().launched == 1
    (run,) = launched.replica.finished()
    assert launched.replica.completer.complete(run) == "recorded"
    (row,) = _outbox(database_url)
    assert (row["event"], row["payload"]["attempt"]) == ("failure", 2)


def test_a_task_without_a_url_or_without_the_event_owes_nothing(
    client, pool, executors, database_url
) -> None:
    events = ["timeout"]  # failure not selected
    launched, _, outcome = _completed(client, pool, executors, database_url, events=events)
    assert outcome == "recorded"
    assert _outbox(database_url) == []
    _notify(database_url, launched.task.id, None, None)  # every event, but no URL
    with transaction(pool) as tx:
        (occ,) = query(database_url, "SELECT id FROM occurrence")
        assert outbox_store.enqueue(tx.conn, [occ["id"]]) == 0


def test_one_notification_per_occurrence_and_event_however_often_it_is_written(
    client, pool, executors, database_url
) -> None:
    _completed(client, pool, executors, database_url)
    (first,) = _outbox(database_url)
    with transaction(pool) as tx:
        assert outbox_store.enqueue(tx.conn, [first["occurrence_id"]]) == 0
    assert _outbox(database_url) == [first]  # the same row, the same delivery_id


def test_a_firing_skipped_by_forbid_owes_a_skipped_notification_only_when_selected(
    client, pool, executors, database_url
) -> None:
    (db_now,) = query(database_url, "SELECT now() AS t")
    created = db_now["t"] - timedelta(hours=2)
    spec = {"executor": "shell", "target": "true", "every": timedelta(hours=1), "overlap": "forbid"}
    chosen = client.add_task(TaskSpec(name="chosen", **spec), now=created)
    default = client.add_task(TaskSpec(name="default", **spec), now=created)
    _notify(database_url, chosen.id, URL, ["skipped"])
    _notify(database_url, default.id, URL, None)  # the default events leave skips out
    for task in (chosen, default):
        client.trigger(task.id, requested_by="test")  # active: the scheduled firing is skipped
    replica = Replica(database_url, pool, executors, "a")
    result = replica.dispatcher.run_once(now=created + timedelta(hours=1, seconds=1))
    assert result.skipped == 2
    (row,) = _outbox(database_url)
    assert (row["task_id"], row["event"], row["payload"]["reason"]) == (
        chosen.id,
        "skipped",
        "overlap",
    )


def test_an_outage_of_coalesced_firings_owes_one_notification_counting_them(
    client, pool, executors, database_url
) -> None:
    """A per-minute task down 30 minutes (misfire `run_once`): the catch-up records 29 firings
    skipped `coalesced` and queues the newest. They owe ONE `skipped` notification, on the
    first of them, with `firing_count` 29 and the span of scheduled times. The old statement
    wrote one per skipped row: 29 POSTs within milliseconds for one task."""
    (db_now,) = query(database_url, "SELECT now() AS t")
    created = db_now["t"] - timedelta(minutes=30, seconds=30)
    spec = {"executor": "shell", "target": "true", "every": timedelta(minutes=1)}
    task = client.add_task(TaskSpec(name="outage", **spec), now=created)
    _notify(database_url, task.id, URL, ["skipped"])
    replica = Replica(database_url, pool, executors, "a")
    replica.dispatcher.run_once(now=db_now["t"])
    skipped = query(
        database_url,
        "SELECT id, scheduled_for, coalesce(last_scheduled_for, scheduled_for) AS last,"
        " firing_count FROM occurrence WHERE status = 'skipped' ORDER BY scheduled_for",
    )
    assert sum(r["firing_count"] for r in skipped) == 29
    (row,) = _outbox(database_url)
    payload = row["payload"]
    assert (row["occurrence_id"], row["event"], payload["reason"]) == (
        skipped[0]["id"],
        "skipped",
        "coalesced",
    )
    assert payload["firing_count"] == 29
    span = [datetime.fromisoformat(payload[f"{end}_scheduled_for"]) for end in ("first", "last")]
    assert span == [skipped[0]["scheduled_for"], skipped[-1]["last"]]
    with transaction(pool) as tx:  # written again (grouped or not): nothing new
        ids = [r["id"] for r in skipped]
        assert outbox_store.enqueue(tx.conn, ids, grouped=True) == 0


def test_an_expired_firing_owes_an_expired_notification_written_with_its_expiry(
    client, pool, database_url
) -> None:
    task = _notified(client, database_url, None, start_deadline=timedelta(minutes=1))
    client.trigger(task.id, requested_by="test")
    _scheduled_two_minutes_ago(database_url)
    report = make_reconciler(pool).run_once()
    (row,) = _outbox(database_url)
    assert report.ids["expired"] == [row["occurrence_id"]]
    assert (row["event"], row["payload"]["outcome"], row["payload"]["reason"]) == (
        "expired",
        "expired",
        "start_deadline",
    )


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)  # loopback only, never through a proxy


@pytest.mark.usefixtures("no_proxy")
def test_a_failed_post_is_due_again_after_its_backoff_and_status_counts_it(
    client, pool, executors, database_url, cli
) -> None:
    _completed(client, pool, executors, database_url)  # port 9: nothing answers
    deliverer = Deliverer(pool, instance_id="d", timeout=2)
    result = deliverer.run_once()
    assert (result.delivered, result.failed, result.fenced) == (0, 1, 0)
    (row,) = query(
        database_url,
        "SELECT attempts, delivered_at, last_error,"
        " next_attempt_at - clock_timestamp() > interval '0.5 s' AS waits"
        " FROM notification_outbox",
    )
    assert (row["attempts"], row["delivered_at"], row["waits"]) == (1, None, True)
    assert row["last_error"]
    assert deliverer.run_once().failed == 0  # not due again before its back-off
    status = cli("status", "--json").json()["notifications"]
    assert (status["undelivered"], status["failing"]) == (1, 1)
    assert status["oldest_undelivered_seconds"] >= 0
    assert "notifications: 1 undelivered, 1 failing" in cli("status").out


def test_a_record_after_another_deliverer_claimed_the_row_again_is_fenced(
    client, pool, executors, database_url
) -> None:
    """Deliverer A's lease passes mid-POST and B claims the row: A's record must change
    nothing. Would fail against a record matched on the row id alone."""
    _completed(client, pool, executors, database_url)
    with transaction(pool) as tx:
        a = outbox_store.claim(tx.conn, lease=timedelta(0))  # its lease passes at once
    with transaction(pool) as tx:
        b = outbox_store.claim(tx.conn, lease=timedelta(minutes=1))
    assert a is not None
    assert b is not None
    assert (a.delivery_id, a.attempts, b.attempts) == (b.delivery_id, 1, 2)
    with transaction(pool) as tx:
        assert not outbox_store.delivered(tx.conn, a)
        assert not outbox_store.failed(tx.conn, a, error="late", delay=timedelta(0))
    with transaction(pool) as tx:
        assert outbox_store.delivered(tx.conn, b)
    (row,) = query(
        database_url, "SELECT attempts, last_error, delivered_at FROM notification_outbox"
    )
    assert (row["attempts"], row["last_error"]) == (2, None)
    assert row["delivered_at"] is not None


def test_a_firing_not_succeeded_by_its_deadline_owes_one_deadline_notification(
    client, pool, executors, database_url
) -> None:
    """Queued past the deadline: notified once, whatever the passes; succeeded in time, or not
    yet at its deadline (database clock): nothing."""
    task = _notified(
        client, database_url, ["deadline"], overlap="allow", deadline=timedelta(minutes=1)
    )
    late, in_time, young = (client.trigger(task.id, requested_by="test") for _ in range(3))
    _scheduled_two_minutes_ago(database_url, [late.id, in_time.id])
    query(
        database_url,
        "UPDATE occurrence SET status = 'success', finished_at = scheduled_for + interval '30 s'"
        " WHERE id = %s RETURNING id",
        (in_time.id,),
    )
    make_reconciler(pool).run_once()
    make_reconciler(pool).run_once()
    (row,) = _outbox(database_url)
    assert (row["occurrence_id"], row["event"]) == (late.id, "deadline")
    assert row["payload"]["outcome"] == "queued"
    assert row["payload"]["reason"] == "not succeeded within its deadline of 60 s"
    assert young.id != late.id


def test_the_prune_deletes_a_firings_notifications_with_it_as_the_daemon_role_may(
    client, pool, database_url
) -> None:
    """Pruned with the history: the occurrence's deletion cascades to its outbox rows (the
    daemon role has no DELETE on the outbox; the cascade runs as the table's owner)."""
    task = _notified(
        client, database_url, None, overlap="allow", start_deadline=timedelta(minutes=1)
    )
    old, new = (client.trigger(task.id, requested_by="test") for _ in range(2))
    _scheduled_two_minutes_ago(database_url)
    make_reconciler(pool).run_once()  # both expire: two notifications
    assert len(_outbox(database_url)) == 2
    query(
        database_url,
        "UPDATE occurrence SET scheduled_for = now() - interval '10 days',"
        " finished_at = now() - interval '10 days' WHERE id = %s RETURNING id",
        (old.id,),
    )
    query(
        database_url,
        "INSERT INTO fleet_setting (key, value, updated_by) VALUES ('history_retention',"
        " '\"1d\"', 'test') RETURNING key",
    )
    assert Pruner(pool, instance_id="p").run_once().occurrences == 1
    assert [r["occurrence_id"] for r in _outbox(database_url)] == [new.id]
