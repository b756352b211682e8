"""`audit` after the prune (issue 29): the prune records each task's newest deleted scheduled
firing in the statement that deletes it (task_pruned, revision 0016); `firing_missing` owes no
firing at or before that mark, whatever the retention is later set to, and owes each task's
firings from its own retention cutoff, not from the shortest retention of any task.

On 9bfec05 (before the mark) `test_pruned_firings_stay_unowed_after_the_retention_is_lengthened`
and `test_a_firing_missing_after_the_mark_is_still_reported_and_only_it` fail (the pruned firings
are reported), `test_one_tasks_short_retention_leaves_the_other_tasks_checked` fails (the other
task's missing firing is not reported: its window was one minute), and the mark tests fail on the
missing table."""

from datetime import datetime, timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs

from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.services.pruner import Pruner
from tests.support import query

MINUTE = timedelta(minutes=1)
EVERY = 10 * MINUTE
BACK = timedelta(hours=3)  # how long ago each planted task was defined


def _now(url: str) -> datetime:
    return query(url, "SELECT now() AS t")[0]["t"]


def _task(client: Any, url: str, name: str, retention: timedelta | None = None) -> Any:
    """A task firing every 10 minutes, defined three hours ago (its definition history moved
    back, as `audit` reads it)."""
    task = client.add_task(
        TaskSpec(
            name=name, executor="shell", target="true", every=EVERY, history_retention=retention
        )
    )
    query(
        url,
        "UPDATE task_event SET at = at - %(back)s, anchor_at = anchor_at - %(back)s "
        "WHERE task_id = %(id)s",
        {"back": BACK, "id": task.id},
    )
    return task


def _firings(url: str, task_id: int) -> list[datetime]:
    """Every firing the task's definition owes up to now, oldest first."""
    (event,) = query(url, "SELECT anchor_at FROM task_event WHERE task_id = %s", (task_id,))
    now, firing, firings = _now(url), event["anchor_at"] + EVERY, []
    while firing < now - MINUTE:  # clear of the audit's settle time
        firings.append(firing)
        firing += EVERY
    return firings


def _occurrence(
    url: str,
    task_id: int,
    seq: int,
    at: datetime,
    *,
    trigger: str = "schedule",
    status: str = "success",
    last: datetime | None = None,
) -> int:
    """A finished occurrence of firing `at` (a skipped summary up to `last` when given), ended a
    second after it."""
    (row,) = query(
        url,
        """
        INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, last_scheduled_for,
            firing_count, trigger, overlap, status, reason, not_before, created_at, finished_at)
        VALUES (%(task)s, %(seq)s, %(at)s, %(last)s, %(count)s, %(trigger)s, 'allow', %(status)s,
            %(reason)s, %(at)s, %(at)s, %(end)s)
        RETURNING id""",
        {
            "task": task_id,
            "seq": seq,
            "at": at,
            "last": last,
            "count": 1 if last is None else 2,
            "trigger": trigger,
            "status": status,
            "reason": "planted" if status == "skipped" else None,
            "end": (last or at) + timedelta(seconds=1),
        },
    )
    return row["id"]


def _history(
    url: str, task_id: int, *, gaps: tuple[datetime, ...] = (), outcome: int = -1
) -> list[datetime]:
    """A row for every owed firing but `gaps`; the one at index `outcome` of them is the task's
    latest outcome, the newer ones `skipped` (the prune keeps it and every newer one). Returns
    the firings with a row."""
    recorded = [f for f in _firings(url, task_id) if f not in gaps]
    shown = outcome % len(recorded)
    for seq, f in enumerate(recorded, start=1):
        _occurrence(url, task_id, seq, f, status="success" if seq <= shown + 1 else "skipped")
    query(
        url,
        "UPDATE task SET occurrence_seq = %s, next_run_at = %s WHERE id = %s",
        (len(recorded), recorded[-1] + EVERY, task_id),
    )
    return recorded


def _kept(url: str, task_id: int) -> list[datetime]:
    rows = query(
        url,
        "SELECT scheduled_for FROM occurrence WHERE task_id = %s ORDER BY scheduled_for",
        (task_id,),
    )
    return [r["scheduled_for"] for r in rows]


def _mark(url: str, task_id: int) -> datetime | None:
    rows = query(url, "SELECT pruned_through FROM task_pruned WHERE task_id = %s", (task_id,))
    return rows[0]["pruned_through"] if rows else None


def _missing(cli: Any) -> tuple[int, list[dict[str, Any]]]:
    result = cli("audit", "--json", "--check", "firing_missing")
    assert result.code in (0, 1), result.err
    return result.code, [v["rows"] for v in result.json()["violations"]]


def test_pruned_firings_stay_unowed_after_the_retention_is_lengthened(
    cli, client, pool, database_url
) -> None:
    task = _task(client, database_url, "short", retention=MINUTE)
    recorded = _history(database_url, task.id)
    report = Pruner(pool, instance_id="t").run_once(until_swept=True)
    assert report.occurrences == len(recorded) - 1  # all but its latest outcome
    assert _kept(database_url, task.id) == recorded[-1:]
    assert _missing(cli) == (0, [])

    assert cli("tasks", "update", "short", "--history-retention", "30d").code == 0
    assert _missing(cli) == (0, [])  # 9bfec05: exit 1, every pruned firing "missing"
    assert cli("tasks", "update", "short", "--history-retention", "none").code == 0
    assert _missing(cli) == (0, [])  # no retention at all: the mark alone


def test_a_firing_missing_after_the_mark_is_still_reported_and_only_it(
    cli, client, pool, database_url
) -> None:
    task = _task(client, database_url, "short", retention=MINUTE)
    firings = _firings(database_url, task.id)
    gap = firings[-3]  # newer than the latest outcome below: after anything the prune deletes
    recorded = _history(database_url, task.id, gaps=(gap,), outcome=-4)
    Pruner(pool, instance_id="t").run_once(until_swept=True)
    assert _missing(cli) == (0, [])  # one minute kept: the gap is past the retention

    assert cli("tasks", "update", "short", "--history-retention", "30d").code == 0
    code, missing = _missing(cli)
    assert code == 1
    assert [(m["task_id"], m["first_missing"], m["missing_count"]) for m in missing] == [
        (task.id, gap.isoformat(), 1)
    ]  # 9bfec05: the pruned firings as well
    assert _mark(database_url, task.id) == recorded[-5]  # the newest firing it deleted


def test_one_tasks_short_retention_leaves_the_other_tasks_checked(
    cli, client, pool, database_url
) -> None:
    short = _task(client, database_url, "short", retention=MINUTE)
    _history(database_url, short.id)
    other = _task(client, database_url, "other")  # no retention: keeps everything
    gap = _firings(database_url, other.id)[-4]  # half an hour ago, long past the other's minute
    _history(database_url, other.id, gaps=(gap,))
    Pruner(pool, instance_id="t").run_once(until_swept=True)

    code, missing = _missing(cli)  # 9bfec05: exit 0, every task checked over one minute only
    assert code == 1
    assert [(m["task_id"], m["first_missing"], m["missing_count"]) for m in missing] == [
        (other.id, gap.isoformat(), 1)
    ]


def test_a_task_pruned_without_a_mark_is_checked_from_its_own_retention(
    cli, client, database_url
) -> None:
    """What a build before revision 0016 leaves: rows past the task's retention deleted, no
    mark. The task's own cutoff still leaves them out, and only its own."""
    task = _task(client, database_url, "hourly", retention=timedelta(hours=1))
    recorded = _history(database_url, task.id)
    query(
        database_url,
        "DELETE FROM occurrence WHERE task_id = %s AND finished_at < now() - interval '1 hour' "
        "AND occurrence_seq < %s",
        (task.id, len(recorded)),
    )
    other = _task(client, database_url, "other")
    gap = _firings(database_url, other.id)[-9]  # 90 minutes ago: past the hourly task's hour
    _history(database_url, other.id, gaps=(gap,))

    code, missing = _missing(cli)
    assert code == 1
    assert [(m["task_id"], m["first_missing"]) for m in missing] == [(other.id, gap.isoformat())]


def test_the_mark_is_the_newest_scheduled_firing_deleted_and_never_goes_back(
    client, pool, database_url
) -> None:
    task = _task(client, database_url, "short", retention=MINUTE)
    f = _firings(database_url, task.id)
    _occurrence(database_url, task.id, 1, f[0])
    _occurrence(database_url, task.id, 2, f[1], status="skipped", last=f[3])  # a summary row
    _occurrence(database_url, task.id, 3, f[5], trigger="manual")  # a manual run: no firing
    _occurrence(database_url, task.id, 4, f[4], trigger="backfill")  # nor is a backfill's row
    shown = _occurrence(database_url, task.id, 5, f[6])
    query(
        database_url,
        "UPDATE task SET occurrence_seq = 5, last_outcome_seq = 5, last_occurrence_id = %s "
        "WHERE id = %s",
        (shown, task.id),
    )
    assert _mark(database_url, task.id) is None
    dry = Pruner(pool, instance_id="t").run_once(dry_run=True)
    assert dry.occurrences == 4
    assert _mark(database_url, task.id) is None  # a dry run records nothing

    assert Pruner(pool, instance_id="t").run_once().occurrences == 4
    assert _kept(database_url, task.id) == [f[6]]
    assert _mark(database_url, task.id) == f[3]  # the summary's last firing

    _occurrence(database_url, task.id, 1, f[2] - MINUTE)  # an older firing, pruned later
    assert Pruner(pool, instance_id="t").run_once().occurrences == 1
    assert _mark(database_url, task.id) == f[3]  # raised only, never lowered


@pytest.mark.parametrize("failing", ["occurrence", "task_pruned"])
def test_a_prune_that_fails_deletes_nothing_and_marks_nothing(
    client, pool, database_url, failing
) -> None:
    """The deletes and the mark are one statement: a failure on either side (a trigger an
    operator added, raising for one task's rows) leaves that task's rows and no mark; the other
    task, pruned a task at a time after the batch failed, has both done."""
    poisoned = _task(client, database_url, "poisoned", retention=MINUTE)
    poisoned_rows = _history(database_url, poisoned.id)
    healthy = _task(client, database_url, "healthy", retention=MINUTE)
    healthy_rows = _history(database_url, healthy.id)
    query(
        database_url,
        f"""
        CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF (CASE WHEN TG_OP = 'DELETE' THEN OLD.task_id ELSE NEW.task_id END)
                    = {poisoned.id} THEN
                RAISE EXCEPTION 'refused' USING ERRCODE = '22008';
            END IF;
            RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
        END $$;
        CREATE TRIGGER refuse BEFORE {"DELETE" if failing == "occurrence" else "INSERT"}
            ON {failing} FOR EACH ROW EXECUTE FUNCTION refuse();
        """,
    )

    with capture_logs() as logs:
        report = Pruner(pool, instance_id="t").run_once(until_swept=True)

    assert [e["task_id"] for e in logs if e["event"] == "prune_task_failed"] == [poisoned.id]
    assert _kept(database_url, poisoned.id) == poisoned_rows
    assert _mark(database_url, poisoned.id) is None
    assert report.occurrences == len(healthy_rows) - 1
    assert _kept(database_url, healthy.id) == healthy_rows[-1:]
    assert _mark(database_url, healthy.id) == healthy_rows[-2]
