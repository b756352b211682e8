"""`deadline` notifications of firings not recorded in time (issue 35 item 1, ADR 0016, revision
0030): a due firing not dispatched past its deadline owes one before it has a row, keyed by the
firing; a firing recorded past its deadline owes it in the transaction that records it; a fleet
down for longer than the scan's lookback owes the deadlines that passed meanwhile (the mark);
and each firing gets one `deadline` row, whichever path wrote it first."""

import threading
from datetime import datetime, timedelta
from typing import Any

import psycopg

from scheduler_daemon.domain.task import OverlapPolicy, TaskSpec
from scheduler_daemon.services import reconciler as reconciler_module
from scheduler_daemon.storage import outbox_store
from tests.support import Replica, make_reconciler, query, wait_for

URL = "http://127.0.0.1:9/hook"
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


def _task(client: Any, created: datetime | None = None, **kw: Any) -> Any:
    """An hourly shell task with a 1-minute deadline that notifies `deadline` (created at
    `created`, database clock: its firings are due from an hour after)."""
    fields = {"name": "job", "every": HOUR, "overlap": "allow", "deadline": MINUTE, **kw}
    spec = TaskSpec(
        executor="shell", target="true", notify_url=URL, notify_on=("deadline",), **fields
    )
    return client.add_task(spec, now=created)


def _reconcile(pool: Any) -> None:
    make_reconciler(pool).run_once()


def _dispatch_behind_a_scan(url: str, replica: Replica, waiting: str) -> Any:
    """A scan's transaction writes the one `deadline` row of a firing not recorded yet and
    holds it uncommitted while `replica`'s dispatch runs on a thread; once the dispatch waits
    on a lock (`waiting` says on what), the scan commits. The dispatch's result."""
    with psycopg.connect(url) as scan:
        assert outbox_store.enqueue_unrecorded_deadlines(scan, limit=10) == 1
        dispatched: list[Any] = []
        thread = threading.Thread(target=lambda: dispatched.append(replica.dispatcher.run_once()))
        thread.start()
        wait_for(
            lambda: query(
                url,
                "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database()",
            ),
            message=waiting,
        )
        scan.commit()
        thread.join(30)
    return dispatched[0]


def _deadlines(url: str) -> list[dict[str, Any]]:
    return query(
        url,
        "SELECT occurrence_id, task_id, scheduled_for, payload FROM notification_outbox"
        " WHERE event = 'deadline' ORDER BY scheduled_for NULLS LAST, id",
    )


def _firings(url: str, task_id: int) -> list[dict[str, Any]]:
    return query(
        url,
        "SELECT id, scheduled_for, status FROM occurrence WHERE task_id = %s ORDER BY id",
        (task_id,),
    )


def _now(url: str) -> datetime:
    (row,) = query(url, "SELECT now() AS t")
    return row["t"]


def _mark(url: str, at: datetime) -> None:
    query(url, "UPDATE deadline_mark SET judged_through = %s RETURNING id", (at,))


def test_a_due_firing_not_dispatched_past_its_deadline_owes_one_notification_before_its_row(
    client, pool, executors, database_url
) -> None:
    """The dispatch is held (no daemon dispatched it): the firing at `next_run_at` is notified
    with no occurrence, once whatever the passes; when the dispatcher records it at last,
    neither the dispatch nor the scan notifies it again, and the firings recorded with it past
    their deadline get one notification in the dispatch, counting them, that the scan does not
    repeat. Would fail against a scan of occurrence rows alone (nothing until the dispatch), or
    a key on the occurrence alone (a second row once it is recorded)."""
    created = _now(database_url) - 3 * HOUR - 30 * MINUTE
    task = _task(client, created)
    _task(client, created, name="paused", paused=True)  # nothing is owed while paused
    _reconcile(pool)
    _reconcile(pool)
    (row,) = _deadlines(database_url)
    due = created + HOUR
    assert (row["occurrence_id"], row["task_id"], row["scheduled_for"]) == (None, task.id, due)
    payload = row["payload"]
    assert (payload["outcome"], payload["attempt"], payload["occurrence_id"]) == (None, 0, None)
    assert payload["reason"] == "not dispatched within its deadline of 60 s"
    # The catch-up (misfire run_once): the two oldest skipped (coalesced), the newest queued.
    replica = Replica(database_url, pool, executors, "a")
    assert replica.dispatcher.run_once().tasks == 1
    _reconcile(pool)
    rows = _deadlines(database_url)
    firings = _firings(database_url, task.id)
    assert [(f["scheduled_for"], f["status"]) for f in firings] == [
        (due, "skipped"),
        (due + HOUR, "skipped"),
        (due + 2 * HOUR, "queued"),
    ]
    assert [(r["occurrence_id"], r["scheduled_for"]) for r in rows] == [
        (None, due),
        (firings[1]["id"], due + HOUR),  # the two others, in one notification
    ]
    assert _span(rows[1]["payload"]) == (2, due + HOUR, due + 2 * HOUR)


def test_firings_recorded_past_their_deadline_owe_it_in_the_transaction_that_records_them(
    client, pool, executors, database_url
) -> None:
    """Three firings missed by hours, caught up at once (misfire run_all): they owe one
    `deadline` notification, on the first, counting the three, as soon as the dispatch
    commits, no reconcile pass needed, and a pass after writes none more. Would fail against
    the scan alone: two of them fell due before its lookback, behind a mark a peer's scan
    raised before the catch-up committed; and against one notification per firing (issue 44:
    18 POSTs for one task after an outage)."""
    task = _task(client, _now(database_url) - 3 * HOUR - 30 * MINUTE, misfire="run_all")
    replica = Replica(database_url, pool, executors, "a")
    assert replica.dispatcher.run_once().queued == 3
    firings = _firings(database_url, task.id)
    (row,) = _deadlines(database_url)
    assert (row["occurrence_id"], row["scheduled_for"]) == (
        firings[0]["id"],
        firings[0]["scheduled_for"],
    )
    assert row["payload"]["outcome"] == "queued"
    assert _span(row["payload"]) == (
        3,
        firings[0]["scheduled_for"],
        firings[-1]["scheduled_for"],
    )
    _reconcile(pool)
    assert len(_deadlines(database_url)) == 1


def test_an_outage_of_a_per_minute_task_owes_one_deadline_notification_however_long(
    client, pool, executors, database_url
) -> None:
    """Down 30 minutes, a per-minute task with a 10 s deadline (misfire run_once): the catch-up
    records 29 firings coalesced and the newest queued, all past their deadline. One `deadline`
    notification counts the 30, and neither the scan after nor a second dispatch adds one.
    The old dispatch wrote one per firing (30 POSTs within milliseconds), and so would the scan
    for any it left."""
    now = _now(database_url)
    task = _task(
        client,
        now - 30 * MINUTE - timedelta(seconds=30),
        name="minutely",
        every=MINUTE,
        overlap=OverlapPolicy.FORBID,  # the default
        deadline=timedelta(seconds=10),
    )
    replica = Replica(database_url, pool, executors, "a")
    replica.dispatcher.run_once(now=now)
    firings = _firings(database_url, task.id)
    counted = query(
        database_url,
        "SELECT sum(firing_count)::int AS n, max(coalesce(last_scheduled_for, scheduled_for))"
        " AS last FROM occurrence WHERE task_id = %s",
        (task.id,),
    )[0]
    assert counted["n"] == 30
    (row,) = _deadlines(database_url)
    assert row["occurrence_id"] == firings[0]["id"]
    assert _span(row["payload"]) == (30, firings[0]["scheduled_for"], counted["last"])
    _reconcile(pool)
    _reconcile(pool)
    assert len(_deadlines(database_url)) == 1


def test_firings_an_operators_pause_records_past_their_deadline_are_judged_by_the_scan(
    client, pool, database_url
) -> None:
    """The firings owed when a per-minute task is paused after 5 minutes undispatched are
    recorded skipped (`paused`, one summary row) by the operator's command, past their
    deadline, with no notification: the scan judges them. Guards the scan's rule that leaves
    alone only what a dispatch recorded late: a rule on lateness alone would lose these."""
    now = _now(database_url)
    task = client.add_task(
        TaskSpec(
            name="minutely",
            executor="shell",
            target="true",
            every=MINUTE,
            deadline=timedelta(seconds=10),
            notify_url=URL,
            notify_on=("deadline",),
        ),
        now=now - 5 * MINUTE - timedelta(seconds=30),
    )
    client.pause(task.id)
    paused = query(
        database_url,
        "SELECT id FROM occurrence WHERE task_id = %s AND reason = 'paused' ORDER BY id",
        (task.id,),
    )
    assert paused  # one row summarising the five
    _reconcile(pool)
    assert sorted(r["occurrence_id"] for r in _deadlines(database_url)) == [p["id"] for p in paused]


def _span(payload: dict[str, Any]) -> tuple[int, datetime, datetime]:
    """A notification's `firing_count`, `first_scheduled_for` and `last_scheduled_for`."""
    return (
        payload["firing_count"],
        datetime.fromisoformat(payload["first_scheduled_for"]),
        datetime.fromisoformat(payload["last_scheduled_for"]),
    )


def test_a_fleet_down_longer_than_the_lookback_owes_the_deadlines_that_passed_meanwhile(
    client, pool, executors, database_url
) -> None:
    """A firing recorded in time, queued when the fleet went down; its deadline passed 2.5
    hours ago, an hour and a half before the scan's lookback. The mark (the fleet's last
    judgement, before the outage) brings it back into the window. Would fail against the
    fixed lookback (the first half shows it: a mark of now misses it)."""
    created = _now(database_url) - 3 * HOUR - 30 * MINUTE
    task = _task(client, created)
    replica = Replica(database_url, pool, executors, "a")
    assert replica.dispatcher.run_once(now=created + HOUR + MINUTE / 2).queued == 1
    assert _deadlines(database_url) == []  # recorded 30 s after it fell due: in time
    query(database_url, "UPDATE task SET paused = true RETURNING id")  # no catch-up here
    _mark(database_url, _now(database_url))
    _reconcile(pool)
    assert _deadlines(database_url) == []  # a lookback of an hour: out of sight
    _mark(database_url, created + HOUR)  # the fleet's last scan, before its outage
    _reconcile(pool)
    (row,) = _deadlines(database_url)
    (firing,) = _firings(database_url, task.id)
    assert (row["occurrence_id"], row["payload"]["outcome"]) == (firing["id"], "queued")
    (mark,) = query(database_url, "SELECT judged_through - now() AS behind FROM deadline_mark")
    assert abs(mark["behind"]) < MINUTE  # caught up


def test_a_pass_judges_a_bounded_number_of_windows_and_the_next_pass_goes_on(
    client, pool, database_url
) -> None:
    """Behind by 30 hours: one pass judges DEADLINE_WINDOWS windows of the lookback's length
    (the firing 29 hours ago), the next the rest (the one 2 hours ago)."""
    task = _task(client)
    old, recent = (client.trigger(task.id, requested_by="test") for _ in range(2))
    query(
        database_url,
        "UPDATE occurrence SET scheduled_for = now() - CASE id WHEN %s THEN interval '29 hours'"
        " ELSE interval '2 hours' END WHERE task_id = %s RETURNING id",
        (old.id, task.id),
    )
    _mark(database_url, _now(database_url) - 30 * HOUR)
    _reconcile(pool)
    assert [r["occurrence_id"] for r in _deadlines(database_url)] == [old.id]
    windows = reconciler_module.DEADLINE_WINDOWS * reconciler_module.DEADLINE_LOOKBACK
    (mark,) = query(database_url, "SELECT now() - judged_through AS behind FROM deadline_mark")
    assert abs(mark["behind"] - (30 * HOUR - windows)) < MINUTE
    _reconcile(pool)
    assert sorted(r["occurrence_id"] for r in _deadlines(database_url)) == [old.id, recent.id]


def test_a_scan_and_a_dispatch_writing_one_firings_deadline_at_once_leave_one_row(
    client, pool, executors, database_url
) -> None:
    """Forced interleaving: a scan's transaction has written the `deadline` row of a firing not
    recorded yet and not committed; the dispatch that records that firing meanwhile (past its
    deadline) writes the same firing's row and must wait on the firing's key, then write
    nothing. Would fail against NOT EXISTS alone (the dispatch's snapshot does not see the
    uncommitted row: two rows, two POSTs) or a key on the occurrence alone."""
    task = _task(client, _now(database_url) - HOUR - 30 * MINUTE)
    replica = Replica(database_url, pool, executors, "a")
    dispatched = _dispatch_behind_a_scan(
        database_url, replica, "the dispatch waiting on the firing's key"
    )
    assert dispatched.queued == 1
    (firing,) = _firings(database_url, task.id)
    (row,) = _deadlines(database_url)
    assert (row["occurrence_id"], row["scheduled_for"]) == (None, firing["scheduled_for"])


def test_a_scan_taking_the_first_late_firings_key_meanwhile_leaves_the_others_notified(
    client, pool, executors, database_url
) -> None:
    """Forced interleaving, two firings recorded late at once (misfire run_all): a scan's
    uncommitted row holds the first firing's key; the dispatch's one notification for both,
    keyed on that firing, waits on it and conflicts. It must run once more and notify the
    second firing on its own key. Would fail against a single try (the second firing's
    deadline lost: the scan leaves firings a dispatch recorded late alone)."""
    task = _task(client, _now(database_url) - 2 * HOUR - 30 * MINUTE, misfire="run_all")
    replica = Replica(database_url, pool, executors, "a")
    dispatched = _dispatch_behind_a_scan(
        database_url, replica, "the dispatch waiting on the first firing's key"
    )
    assert dispatched.queued == 2
    first, second = _firings(database_url, task.id)
    _reconcile(pool)
    rows = _deadlines(database_url)
    assert [(r["occurrence_id"], r["scheduled_for"]) for r in rows] == [
        (None, first["scheduled_for"]),
        (second["id"], second["scheduled_for"]),
    ]
    assert rows[1]["payload"]["firing_count"] == 1
