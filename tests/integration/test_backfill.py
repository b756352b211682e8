"""`tasks backfill` against a real database: the firings of a range in the task's zone across DST
changes, the latest outcome deciding which are queued again, idempotence (twice, and two at once
with the interleaving forced), `forbid` tasks run one after another in firing order, the --max
refusal, a dry run that writes nothing, and `audit`'s one-backfill-per-firing rule."""

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from scheduler_daemon.client import Client
from scheduler_daemon.domain.status import OverlapPolicy
from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.storage import migration, occurrence_store
from scheduler_daemon.storage import query as named
from scheduler_daemon.storage.database import one_trip
from tests.support import query, shell_task, wait_for

HOUR = timedelta(hours=1)


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _berlin_task(client: Any, **kw: Any) -> Any:
    """02:30 every day in Berlin: a wall time the spring-forward skips and the fall-back repeats."""
    return client.add_task(
        TaskSpec(
            name="nightly",
            executor="shell",
            target="true",
            cron="30 2 * * *",
            timezone="Europe/Berlin",
            **kw,
        )
    )


def _plant(url: str, task_id: int, seq: int, at: datetime, status: str, **kw: Any) -> int:
    """An occurrence row written as a daemon would have (terminal statuses get finished_at)."""
    terminal = status not in ("queued", "launching", "running")
    (row,) = query(
        url,
        """
        INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, last_scheduled_for,
            firing_count, trigger, overlap, status, reason, not_before, finished_at)
        VALUES (%(t)s, %(seq)s, %(at)s, %(last)s, %(count)s, %(trigger)s, 'forbid', %(status)s,
            %(reason)s, %(at)s, CASE WHEN %(terminal)s THEN %(at)s::timestamptz END)
        RETURNING id
        """,
        {
            "t": task_id,
            "seq": seq,
            "at": at,
            "last": kw.get("last"),
            "count": kw.get("count", 1),
            "trigger": kw.get("trigger", "schedule"),
            "status": status,
            "reason": "misfire" if status in ("skipped", "expired", "cancelled") else None,
            "terminal": terminal,
        },
    )
    query(
        url,
        "UPDATE task SET occurrence_seq = greatest(occurrence_seq, %s) WHERE id = %s",
        (seq, task_id),
    )
    return row["id"]


def _backfills(url: str, task_id: int) -> list[dict[str, Any]]:
    return query(
        url,
        "SELECT id, occurrence_seq, scheduled_for, overlap, status, concurrency_key "
        "FROM occurrence WHERE task_id = %s AND trigger = 'backfill' ORDER BY occurrence_seq",
        (task_id,),
    )


def test_backfill_walks_the_zone_across_both_dst_changes(client, database_url) -> None:
    task = _berlin_task(client, dst_overlap="both")
    # Spring forward 2026-03-29 02:00 CET -> 03:00 CEST: 02:30 is shifted to the gap's end
    # (01:00Z). Fall back 2026-10-25 03:00 CEST -> 02:00 CET: 02:30 happens twice.
    spring = client.backfill(
        task.id,
        start=_utc("2026-03-27T12:00"),
        end=_utc("2026-03-30T12:00"),
        requested_by="test",
        dry_run=True,
    )
    assert [f.scheduled_for for f in spring.firings] == [
        _utc("2026-03-28T01:30"),  # 02:30 CET
        _utc("2026-03-29T01:00"),  # the gap's end, 03:00 CEST
        _utc("2026-03-30T00:30"),  # 02:30 CEST
    ]
    fall = client.backfill(
        task.id, start=_utc("2026-10-24T12:00"), end=_utc("2026-10-25T12:00"), requested_by="test"
    )
    assert [f.scheduled_for for f in fall.firings] == [
        _utc("2026-10-25T00:30"),  # 02:30 CEST
        _utc("2026-10-25T01:30"),  # 02:30 CET, the repeated hour
    ]
    assert {f.outcome for f in fall.firings} == {"missing"}  # before the task existed
    rows = _backfills(database_url, task.id)
    assert [r["scheduled_for"] for r in rows] == [f.scheduled_for for f in fall.firings]
    assert [r["id"] for r in rows] == fall.occurrence_ids
    assert {r["status"] for r in rows} == {"queued"}


def test_the_latest_outcome_of_each_firing_decides_and_a_second_backfill_queues_nothing(
    cli, client, database_url
) -> None:
    task = _berlin_task(client, overlap="allow")
    day = [_utc(f"2026-06-0{d}T00:30") for d in range(1, 8)]  # 02:30 CEST
    _plant(database_url, task.id, 1, day[0], "success")
    _plant(database_url, task.id, 2, day[1], "failed")
    _plant(database_url, task.id, 3, day[2], "failed")
    _plant(database_url, task.id, 4, day[2], "success", trigger="backfill")  # fixed already
    _plant(database_url, task.id, 5, day[3], "skipped", last=day[4], count=2)  # one summary
    _plant(database_url, task.id, 6, day[5], "running")  # still active: never queued again
    # day[6]: no row at all

    first = cli(
        "tasks", "backfill", "nightly", "--from", "2026-06-01", "--to", "2026-06-07T12:00", "--json"
    )
    assert first.code == 0, first.err
    queued = _backfills(database_url, task.id)
    assert [r["scheduled_for"] for r in queued][1:] == [day[1], day[3], day[4], day[6]]
    assert first.json()["occurrence_ids"] == [r["id"] for r in queued[1:]]
    assert first.json()["firings"] == 7

    again = cli(
        "tasks", "backfill", "nightly", "--from", "2026-06-01", "--to", "2026-06-07T12:00", "--json"
    )
    assert again.code == 0, again.err
    assert again.json()["occurrence_ids"] == []
    assert len(_backfills(database_url, task.id)) == len(queued)

    only_failed = client.backfill(
        task.id, start=day[0], end=day[6], include=("skipped",), requested_by="test", dry_run=True
    )
    assert only_failed.wanted == []  # every skipped firing has its backfill occurrence now


def test_two_backfills_at_once_queue_each_firing_once(client, database_url) -> None:
    # Both backfills read the history and insert while the other one is between its read and its
    # insert: a version that read before taking the task lock, with no unique index behind it,
    # queues every firing twice. The held task lock releases both at once.
    task = _berlin_task(client, overlap="allow")
    start, end = _utc("2026-05-01T00:00"), _utc("2026-05-20T00:00")
    results: list[Any] = []
    errors: list[BaseException] = []

    def backfill() -> None:  # each its own Client: one Client's calls take turns on its connection
        try:
            with Client(database_url) as own:
                results.append(own.backfill(task.id, start=start, end=end, requested_by="t"))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT 1 FROM task WHERE id = %s FOR UPDATE", (task.id,))
        threads = [threading.Thread(target=backfill) for _ in range(2)]
        for thread in threads:
            thread.start()
        wait_for(
            lambda: (
                query(
                    database_url,
                    "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()",
                )[0]["n"]
                >= 2
            ),
            message="both backfills to wait for the task lock",
        )
        holder.rollback()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    rows = _backfills(database_url, task.id)
    assert len(rows) == 19
    assert len({r["scheduled_for"] for r in rows}) == 19
    ids = sorted(i for r in results for i in r.occurrence_ids)
    assert ids == sorted(r["id"] for r in rows)  # every row was queued by exactly one of them


def test_the_database_refuses_a_second_backfill_occurrence_of_a_firing(client, database_url):
    # Guarantee 2 lives in firing_key (issue 47): its primary key refuses a firing's second
    # backfill key, and the backfill insert goes in only with its key (fails if the statement's
    # key insert is removed: the second occurrence would go in).
    task = shell_task(client)
    at = _utc("2026-01-01T00:00")
    params = {
        "task_id": task.id,
        "scheduled_for": at,
        "overlap": "forbid",
        "concurrency_key": None,
        "requested_by": "test",
        "now": at,
    }
    with psycopg.connect(database_url) as conn:
        assert named.run(conn, "occurrence_insert_backfill", {**params, "occurrence_seq": 1})
        assert (
            named.run(conn, "occurrence_insert_backfill", {**params, "occurrence_seq": 2}) is None
        )
        conn.commit()
    with pytest.raises(psycopg.errors.UniqueViolation):
        query(database_url, "INSERT INTO firing_key VALUES (%s, %s, 'backfill')", (task.id, at))
    query(database_url, "INSERT INTO firing_key VALUES (%s, %s, 'schedule')", (task.id, at))
    rows = query(database_url, "SELECT occurrence_seq FROM occurrence WHERE trigger = 'backfill'")
    assert rows == [{"occurrence_seq": 1}]


def test_a_forbid_task_runs_its_backfill_one_after_another_in_firing_order(
    client, pool, database_url
) -> None:
    task = _berlin_task(client, concurrency_key="nightly-key")
    assert task.spec.overlap == OverlapPolicy.FORBID
    active = _plant(database_url, task.id, 1, _utc("2026-07-01T00:30"), "running")
    result = client.backfill(
        task.id, start=_utc("2026-06-01T00:00"), end=_utc("2026-06-04T00:00"), requested_by="test"
    )
    rows = _backfills(database_url, task.id)
    assert [r["scheduled_for"] for r in rows] == sorted(r["scheduled_for"] for r in rows)
    assert {r["overlap"] for r in rows} == {"queue"}
    assert {r["concurrency_key"] for r in rows} == {"nightly-key"}
    assert len(result.occurrence_ids) == 3

    def claim() -> list[int]:  # the launcher's claim as it sends it, without starting the jobs
        statement = occurrence_store.claim_launch_statement(
            owner="t", slots=10, ttl=HOUR, grace=HOUR, known=migration.known_revisions()
        )
        _, launched = occurrence_store.launched(one_trip(pool, statement)[0])
        return [claim.id for claim, _ in launched]

    assert claim() == []  # the task's running occurrence holds it
    query(
        database_url,
        "UPDATE occurrence SET status = 'success', finished_at = now() WHERE id = %s",
        (active,),
    )
    for row in rows:  # then one at a time, oldest firing first
        assert claim() == [row["id"]]
        query(
            database_url,
            "UPDATE occurrence SET status = 'failed', finished_at = now(), "
            "claim_owner = NULL, claim_expires_at = NULL WHERE id = %s",
            (row["id"],),
        )
    # And while a backfill occurrence is active, a trigger of the forbid task is skipped.
    client.backfill(
        task.id, start=_utc("2026-06-05T00:00"), end=_utc("2026-06-05T12:00"), requested_by="test"
    )
    assert client.trigger(task.id, requested_by="test").status == "skipped"


def test_a_range_over_max_is_refused_in_one_line_and_a_dry_run_writes_nothing(
    cli, client, counts
) -> None:
    client.add_task(TaskSpec(name="minutely", executor="shell", target="true", cron="* * * * *"))
    before = counts()

    def backfill(start: str, end: str, *more: str) -> Any:
        return cli("tasks", "backfill", "minutely", "--from", start, "--to", end, *more)

    refused = backfill("2026-01-01T00:00Z", "2026-01-01T02:00Z", "--max", "100")
    assert refused.code == 2
    assert refused.err.count("\n") == 1
    assert "more than 100 firings" in refused.err
    dry = backfill("2026-01-01T00:00Z", "2026-01-01T00:09Z", "--dry-run")
    assert dry.code == 0, dry.err
    lines = dry.out.splitlines()
    assert len(lines) == 11
    assert lines[0].startswith("2026-01-01T00:00:00+00:00  missing")
    assert lines[-1] == "dry run: 10 of 10 firings would be queued for task minutely"
    assert counts() == before
    bad = backfill("2026-01-01", "2026-01-02", "--include", "failed,nope")
    assert bad.code == 2
    assert "--include" in bad.err
    assert counts() == before


def test_firings_still_owed_to_the_dispatcher_are_left_out(client, database_url) -> None:
    task = client.add_task(TaskSpec(name="m", executor="shell", target="true", cron="* * * * *"))
    now = query(database_url, "SELECT now() AS t")[0]["t"]
    result = client.backfill(
        task.id,
        start=now - 3 * timedelta(minutes=1),
        end=now + timedelta(hours=1),
        requested_by="test",
        dry_run=True,
    )
    assert result.firings
    assert all(f.scheduled_for < task.next_run_at for f in result.firings)
    assert len(result.firings) <= 3


def test_audit_reports_two_backfill_occurrences_of_one_firing(cli, client, database_url) -> None:
    task = shell_task(client)
    # No index on occurrence keeps a backfill unique (firing_key does, issue 47).
    at = _utc("2026-02-01T00:00")
    _plant(database_url, task.id, 1, at, "failed")  # the scheduled one: allowed beside them
    first = _plant(database_url, task.id, 2, at, "failed", trigger="backfill")
    second = _plant(database_url, task.id, 3, at, "success", trigger="backfill")
    result = cli("audit", "--json", "--check", "firing_recorded_twice")
    assert result.code == 1, result.err
    (violation,) = result.json()["violations"]
    assert violation["rows"]["trigger"] == "backfill"
    assert violation["rows"]["occurrence_ids"] == [first, second]
    assert "2 backfill occurrences" in violation["message"]


def test_an_interval_tasks_backfill_walks_exactly_the_firings_the_dispatcher_recorded(
    client, pool, executors, database_url
) -> None:
    # Backfill queued the creation instant (k = 0) of an interval task, which the dispatcher
    # never fires and `audit` never owes (found on 646db2b; issue 29).
    from tests.support import Replica

    task = shell_task(
        client,
        "every-second",
        every=timedelta(seconds=1),
        misfire="run_all",
        misfire_grace=timedelta(hours=1),
        overlap=OverlapPolicy.ALLOW,
    )
    anchor = task.spec.anchor
    later = anchor + timedelta(seconds=5, milliseconds=500)
    Replica(database_url, pool, executors, "a").dispatcher.run_once(now=later)
    dispatched = [
        r["scheduled_for"]
        for r in query(
            database_url,
            "SELECT scheduled_for FROM occurrence WHERE trigger = 'schedule' ORDER BY 1",
        )
    ]
    assert dispatched == [anchor + timedelta(seconds=k) for k in range(1, 6)]
    result = client.backfill(
        task.id,
        start=anchor - timedelta(minutes=1),
        end=later,
        include=("missing",),
        dry_run=True,
        requested_by="test",
        now=later,
    )
    assert [f.scheduled_for for f in result.firings] == dispatched
    assert result.wanted == []  # every firing has its row: none is missing
