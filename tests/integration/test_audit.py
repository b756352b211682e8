"""`scheduler-daemon audit` against a real database: each invariant violated on purpose (rows
planted with SQL, the constraint that forbids them dropped first in this test's own database) is
reported by exactly its check with the planted ids; a real daemon's history is reported clean; a
violation gone by the second snapshot is not reported; bad input is one line and exit 2."""

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from scheduler_daemon.domain.audit import CHECK_NAMES
from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.services.auditor import Auditor
from scheduler_daemon.storage import migration
from scheduler_daemon.storage.database import transaction
from tests.support import query, shell_task, wait_for

SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)


def _now(url: str) -> datetime:
    return query(url, "SELECT now() AS t")[0]["t"]


def _backdated(client: Any, url: str, name: str, every: timedelta, *, ago: str) -> tuple[Any, Any]:
    """A shell task every `every` whose creation event is moved `ago` (an SQL interval) into
    the past, as if created then with no daemon since: (the task, that creation event's row)."""
    task = client.add_task(TaskSpec(name=name, executor="shell", target="true", every=every))
    query(
        url,
        "UPDATE task_event SET at = at - %(ago)s::interval,"
        " anchor_at = anchor_at - %(ago)s::interval WHERE task_id = %(id)s RETURNING id",
        {"ago": ago, "id": task.id},
    )
    (created,) = query(url, "SELECT * FROM task_event WHERE task_id = %s", (task.id,))
    return task, created


def _occurrence(
    url: str,
    task_id: int,
    seq: int,
    *,
    status: str = "success",
    scheduled_for: datetime,
    created_at: datetime | None = None,
    trigger: str = "schedule",
    overlap: str = "allow",
    key: str | None = None,
    firing_count: int = 1,
    last_scheduled_for: datetime | None = None,
    finished_at: datetime | None = None,
) -> int:
    terminal = status not in ("queued", "launching", "running")
    created_at = created_at or scheduled_for
    finished_at = finished_at or created_at + SECOND
    (row,) = query(
        url,
        """
        INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, last_scheduled_for,
            firing_count, trigger, overlap, concurrency_key, status, reason, not_before,
            created_at, updated_at, finished_at)
        VALUES (%(task_id)s, %(seq)s, %(sf)s, %(last)s, %(count)s, %(trigger)s, %(overlap)s,
            %(key)s, %(status)s, %(reason)s, %(sf)s, %(created)s, %(created)s, %(finished)s)
        RETURNING id""",
        {
            "task_id": task_id,
            "seq": seq,
            "sf": scheduled_for,
            "last": last_scheduled_for,
            "count": firing_count,
            "trigger": trigger,
            "overlap": overlap,
            "key": key,
            "status": status,
            "reason": "planted" if status in ("skipped", "expired", "cancelled") else None,
            "created": created_at,
            "finished": finished_at if terminal else None,
        },
    )
    return row["id"]


def _run(
    url: str,
    occurrence_id: int,
    *,
    token: int,
    start: datetime,
    end: datetime | None,
    status: str = "success",
    takeover_at: datetime | None = None,
) -> int:
    takeover_at = takeover_at or start + 20 * SECOND
    (row,) = query(
        url,
        """
        INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at,
            takeover_at, status, started_at, finished_at, build_revision)
        VALUES (%s, 1, 'planted', %s, %s, %s, %s, %s, %s, 'planted') RETURNING id""",
        (
            occurrence_id,
            token,
            takeover_at - 5 * SECOND,
            takeover_at,
            "running" if end is None else status,
            start,
            end,
        ),
    )
    return row["id"]


def _audit(cli: Any, *args: str) -> tuple[int, dict[str, Any]]:
    result = cli("audit", "--json", *args)
    assert result.code in (0, 1), result.err
    return result.code, result.json()


def _violations(report: dict[str, Any], check: str | None = None) -> list[dict[str, Any]]:
    return [v for v in report["violations"] if check is None or v["check"] == check]


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


# -- each check, planted -----------------------------------------------------------------------
def test_a_scheduled_firing_recorded_twice_is_reported_with_both_occurrences(
    cli, client, database_url
) -> None:
    task = shell_task(client)
    # No index on occurrence keeps a scheduled firing unique (firing_key does, issue 47).
    at = _now(database_url) - 10 * MINUTE
    first = _occurrence(database_url, task.id, 1, scheduled_for=at)
    second = _occurrence(database_url, task.id, 2, scheduled_for=at, status="skipped")
    _occurrence(database_url, task.id, 3, scheduled_for=at, trigger="manual")  # not scheduled

    code, report = _audit(cli)
    assert code == 1
    (v,) = _violations(report)
    assert v["check"] == "firing_recorded_twice"
    assert v["rows"]["task_id"] == task.id
    assert v["rows"]["occurrence_ids"] == [first, second]
    assert _instant(v["rows"]["scheduled_for"]) == at

    text = cli("audit")
    assert text.code == 1
    assert text.out.splitlines()[0].startswith(f"firing_recorded_twice: task {task.id}: firing ")
    assert text.out.splitlines()[-1].startswith("audit: 1 violation(s) in 12 check(s), since ")


def test_owed_firings_without_a_row_are_reported_as_gaps_and_paused_ones_are_not_owed(
    cli, client, database_url
) -> None:
    # Ten minutes of history with no daemon: created ten minutes ago, paused for two firings.
    task, created = _backdated(client, database_url, "every10s", 10 * SECOND, ago="10 minutes")
    anchor = created["anchor_at"]
    for active, k in ((False, 25.5), (True, 27.5)):
        query(
            database_url,
            """
            INSERT INTO task_event (task_id, at, kind, schedule_kind, every, anchor_at, timezone,
                dst_gap, dst_overlap, active)
            VALUES (%s, %s, 'changed', 'interval', '10 seconds', %s, 'UTC', 'shift', 'first', %s)
            """,
            (task.id, anchor + k * 10 * SECOND, anchor, active),
        )
    # Rows for firings 1..100 except 5, 6 and 12 (missing), 20..24 (one summary row), 26 and 27
    # (paused: not owed, so not missing either).
    absent = {5, 6, 12, 20, 21, 22, 23, 24, 26, 27}
    for k in (k for k in range(1, 101) if k not in absent):
        _occurrence(database_url, task.id, k, scheduled_for=anchor + k * 10 * SECOND)
    _occurrence(
        database_url,
        task.id,
        200,
        status="skipped",
        scheduled_for=anchor + 200 * SECOND,
        firing_count=5,
        last_scheduled_for=anchor + 240 * SECOND,
    )

    code, report = _audit(cli)
    assert code == 1
    gaps = _violations(report)
    assert {v["check"] for v in gaps} == {"firing_missing"}
    assert [
        (
            v["rows"]["task_id"],
            _instant(v["rows"]["first_missing"]),
            _instant(v["rows"]["last_missing"]),
            v["rows"]["missing_count"],
            v["rows"]["task_event_id"],
        )
        for v in gaps
    ] == [
        (task.id, anchor + 50 * SECOND, anchor + 60 * SECOND, 2, created["id"]),
        (task.id, anchor + 120 * SECOND, anchor + 120 * SECOND, 1, created["id"]),
    ]
    # A window that starts after the gaps sees none of them.
    since = (anchor + 125 * SECOND).isoformat()
    code, later = _audit(cli, "--since", since, "--check", "firing_missing")
    assert (code, _violations(later)) == (0, [])


def test_two_active_occurrences_of_a_forbid_task_are_reported(cli, client, database_url) -> None:
    task = shell_task(client)
    query(database_url, "DROP INDEX occurrence_forbid_active_key")
    at = _now(database_url) - MINUTE
    ids = [
        _occurrence(database_url, task.id, k, status="queued", overlap="forbid", scheduled_for=t)
        for k, t in ((1, at), (2, at + SECOND))
    ]
    _occurrence(database_url, task.id, 3, overlap="forbid", scheduled_for=at + 2 * SECOND)

    code, report = _audit(cli)
    assert code == 1
    (v,) = _violations(report)
    assert v["check"] == "forbid_active_twice"
    assert v["rows"] == {"task_id": task.id, "occurrence_ids": ids}


def test_overlapping_runs_of_a_forbid_task_and_of_a_concurrency_key_are_reported(
    cli, client, database_url
) -> None:
    t = _now(database_url)
    forbid = shell_task(client, "forbid")
    a, b = shell_task(client, "a"), shell_task(client, "b")

    def forbid_run(seq: int, start: timedelta, end: timedelta) -> int:
        occ = _occurrence(database_url, forbid.id, seq, overlap="forbid", scheduled_for=t - start)
        return _run(database_url, occ, token=1, start=t - start, end=t - end)

    first = forbid_run(1, 10 * MINUTE, 9 * MINUTE)
    second = forbid_run(2, 9 * MINUTE + 30 * SECOND, 8 * MINUTE)
    forbid_run(3, 4 * MINUTE, 3 * MINUTE)  # these two only touch: no overlap
    forbid_run(4, 3 * MINUTE, 2 * MINUTE)
    x = _occurrence(database_url, a.id, 1, key="k", scheduled_for=t - 8 * MINUTE)
    y = _occurrence(database_url, b.id, 1, key="k", scheduled_for=t - 7 * MINUTE)
    older = _run(database_url, x, token=1, start=t - 7 * MINUTE, end=t - 6 * MINUTE)
    younger = _run(database_url, y, token=1, start=t - 6 * MINUTE - SECOND, end=None)

    code, report = _audit(cli)
    assert code == 1
    found = sorted((v["rows"]["scope"], tuple(v["rows"]["run_ids"])) for v in _violations(report))
    assert {v["check"] for v in _violations(report)} == {"runs_overlap"}
    assert found == [("concurrency_key", (older, younger)), ("task", (first, second))]
    keyed = next(v for v in _violations(report) if v["rows"]["scope"] == "concurrency_key")
    assert keyed["rows"]["concurrency_key"] == "k"


def test_a_run_that_started_while_an_older_occurrence_of_its_key_waited_is_reported(
    cli, client, database_url
) -> None:
    t = _now(database_url)
    a, b = shell_task(client, "a"), shell_task(client, "b")
    x = _occurrence(
        database_url, a.id, 1, key="k", scheduled_for=t - 20 * MINUTE, finished_at=t - 9 * MINUTE
    )
    y = _occurrence(database_url, b.id, 1, key="k", scheduled_for=t - 19 * MINUTE)
    jumped = _run(database_url, y, token=1, start=t - 15 * MINUTE, end=t - 14 * MINUTE)
    _run(database_url, x, token=1, start=t - 10 * MINUTE, end=t - 9 * MINUTE)
    # Older by firing but queued after the younger one: the younger did not jump a queue.
    late = _occurrence(
        database_url,
        a.id,
        2,
        key="k2",
        scheduled_for=t - 30 * MINUTE,
        created_at=t - 14 * MINUTE,
        finished_at=t - 11 * MINUTE,
    )
    early = _occurrence(database_url, b.id, 2, key="k2", scheduled_for=t - 29 * MINUTE)
    _run(database_url, early, token=1, start=t - 16 * MINUTE, end=t - 15 * MINUTE - SECOND)
    _run(database_url, late, token=1, start=t - 12 * MINUTE, end=t - 11 * MINUTE)
    # A queue task: occurrence 2 ran while occurrence 1 was still queued.
    queue = shell_task(client, "q", overlap="queue")
    waiting = _occurrence(
        database_url, queue.id, 1, status="queued", overlap="queue", scheduled_for=t - 8 * MINUTE
    )
    ran = _occurrence(database_url, queue.id, 2, overlap="queue", scheduled_for=t - 7 * MINUTE)
    ran_run = _run(database_url, ran, token=1, start=t - 5 * MINUTE, end=t - 4 * MINUTE)

    code, report = _audit(cli)
    assert code == 1
    assert {v["check"] for v in _violations(report)} == {"fifo_order"}
    found = [
        (
            v["rows"]["scope"],
            v["rows"].get("concurrency_key", v["rows"].get("task_id")),
            v["rows"]["occurrence_id"],
            v["rows"]["run_id"],
            v["rows"]["waiting_occurrence_id"],
        )
        for v in _violations(report)
    ]
    assert found == [
        ("concurrency_key", "k", y, jumped, x),
        ("queue_task", queue.id, ran, ran_run, waiting),
    ]


def test_runs_above_the_budget_in_force_are_reported_and_a_just_lowered_budget_is_not(
    cli, client, database_url
) -> None:
    t = _now(database_url)
    task = shell_task(client)
    query(database_url, "DELETE FROM fleet_setting_event")
    for at, value in ((t - MINUTE * 60, 2), (t - 200 * SECOND, 5), (t - 100.5 * SECOND, 1)):
        query(
            database_url,
            "INSERT INTO fleet_setting_event (key, value, at) VALUES "
            "('max_concurrent_runs', %s, %s)",
            (json.dumps(value), at),
        )
    seq = iter(range(1, 100))

    def run(start: timedelta, end: timedelta) -> int:
        occ = _occurrence(
            database_url, task.id, next(seq), scheduled_for=t - start, trigger="manual"
        )
        return _run(database_url, occ, token=1, start=t - start, end=t - end)

    r1 = run(10 * MINUTE, 5 * MINUTE)
    r2 = run(9 * MINUTE, 5 * MINUTE)
    r3 = run(8 * MINUTE, 5 * MINUTE)  # the third at once under a budget of 2
    run(100 * SECOND, 90 * SECOND)  # two at once, half a second after the budget became 1:
    run(100 * SECOND, 90 * SECOND)  # admission may have read the old 5
    r6 = run(40 * SECOND, 30 * SECOND)
    r7 = run(40 * SECOND - timedelta(milliseconds=1), 30 * SECOND)  # two under a budget of 1

    code, report = _audit(cli)
    assert code == 1
    assert {v["check"] for v in _violations(report)} == {"budget_exceeded"}
    assert [
        (v["rows"]["run_id"], v["rows"]["executing_run_ids"], v["rows"]["budget"])
        for v in _violations(report)
    ] == [(r3, [r1, r2, r3], 2), (r7, [r6, r7], 1)]


def test_an_occurrence_with_two_successful_runs_is_reported(cli, client, database_url) -> None:
    t = _now(database_url)
    task = shell_task(client)
    occ = _occurrence(database_url, task.id, 1, scheduled_for=t - 10 * MINUTE)
    runs = [
        _run(
            database_url,
            occ,
            token=k,
            start=t - (10 - 2 * k) * MINUTE,
            end=t - (9 - 2 * k) * MINUTE,
        )
        for k in (1, 2)
    ]
    other = _occurrence(database_url, task.id, 2, scheduled_for=t - 5 * MINUTE)
    _run(database_url, other, token=1, start=t - 5 * MINUTE, end=t - 4 * MINUTE, status="failed")
    _run(database_url, other, token=2, start=t - 3 * MINUTE, end=t - 2 * MINUTE)

    code, report = _audit(cli)
    assert code == 1
    (v,) = _violations(report)
    assert (v["check"], v["rows"]) == ("success_twice", {"occurrence_id": occ, "run_ids": runs})


def _instance(url: str, name: str, at: datetime, *, stopping: bool = False) -> None:
    """An instance that started an hour before `at` and was last heard from at `at`."""
    query(
        url,
        """
        INSERT INTO instance (id, hostname, pid, version, schema_revision, concurrency, lease_ttl,
            lease_grace, reconcile_interval, stopping, started_at, heartbeat_at)
        VALUES (%s, 'h', 1, 'test', 'test', 1, '3 seconds', '1 second', '1 second', %s,
            %s - interval '1 hour', %s)""",
        (name, stopping, at, at),
    )


def takeover_overdue_scenario(url: str, client: Any, pool: Any) -> None:
    """A run left running past its takeover point is reported while a live peer could have
    taken it over, and not while none is alive or the only one drains. The audit runs at an
    instant `t` a minute past the database's now, its clock pinned there: the quiet period
    after the server's start (ADR 0007: TTL + grace of the registered instances, plus their
    reconcile interval and the audit's 10 s slack) has ended by then however young the server
    is, so the scenario does not depend on the server's age (it failed on a server started
    less than about 15 s before, the README's first run on a fresh embedded server)."""
    t = _now(url) + MINUTE
    task = shell_task(client)
    stuck_occ = _occurrence(url, task.id, 1, status="running", scheduled_for=t - MINUTE)
    stuck = _run(url, stuck_occ, token=1, start=t - MINUTE, end=None, takeover_at=t - 30 * SECOND)
    fresh_occ = _occurrence(url, task.id, 2, status="running", scheduled_for=t)
    _run(url, fresh_occ, token=1, start=t, end=None, takeover_at=t + 20 * SECOND)

    def audit() -> Any:
        return Auditor(pool, checks=("takeover_overdue",), now=t).run_once()

    assert audit().ok  # no instance alive: nobody to take it over
    _instance(url, "draining", t, stopping=True)
    assert audit().ok  # a draining instance no longer reconciles
    _instance(url, "alive", t)
    report = audit()
    (v,) = report.violations
    assert v.check == "takeover_overdue"
    assert (v.rows["run_id"], v.rows["occurrence_id"]) == (stuck, stuck_occ)
    assert v.rows["live_instance_ids"] == ("alive",)


def test_a_run_left_running_past_its_takeover_point_while_a_peer_lives_is_reported(
    client, pool, database_url
) -> None:
    takeover_overdue_scenario(database_url, client, pool)


def test_a_one_shot_task_whose_status_disagrees_with_its_newest_occurrence_is_reported(
    cli, client, database_url
) -> None:
    t = _now(database_url)

    def one_shot(name: str, status: str, *occurrence_statuses: str) -> int:
        task = client.add_task(
            TaskSpec(name=name, executor="shell", target="true", at=t + timedelta(hours=1))
        )
        query(database_url, "UPDATE task SET status = %s WHERE id = %s", (status, task.id))
        for seq, occ_status in enumerate(occurrence_statuses, 1):
            _occurrence(
                database_url, task.id, seq, status=occ_status, scheduled_for=t - seq * MINUTE
            )
        return task.id

    completed_but_failed = one_shot("c", "completed", "failed")
    running_but_done = one_shot("r", "running", "success")
    running_with_none = one_shot("n", "running")
    one_shot("ok-failed", "failed", "success", "timeout")  # newest (seq 2) timed out: failed
    one_shot("ok-running", "running", "failed", "queued")
    one_shot("ok-never", "cancelled")  # its instant passed while paused: no occurrence

    code, report = _audit(cli)
    assert code == 1
    assert {v["check"] for v in _violations(report)} == {"one_shot_status"}
    assert [
        (v["rows"]["task_id"], v["rows"]["occurrence_status"]) for v in _violations(report)
    ] == [
        (completed_but_failed, "failed"),
        (running_but_done, "success"),
        (running_with_none, None),
    ]


def test_lease_tokens_that_repeat_or_fall_with_start_time_are_reported(
    cli, client, database_url
) -> None:
    t = _now(database_url)
    task = shell_task(client)
    # No unique (occurrence, token) on run since issue 47: the audit is what reports it.

    def runs(seq: int, *tokens: int) -> list[int]:
        occ = _occurrence(database_url, task.id, seq, scheduled_for=t - seq * MINUTE)
        return [
            _run(
                database_url,
                occ,
                token=token,
                start=t - seq * MINUTE + k * SECOND,
                end=t - seq * MINUTE + k * SECOND + timedelta(milliseconds=500),
                status="failed" if k < len(tokens) - 1 else "success",
            )
            for k, token in enumerate(tokens)
        ]

    falling = runs(1, 2, 1)
    repeated = runs(2, 1, 1)
    runs(3, 1, 2, 5)

    code, report = _audit(cli)
    assert code == 1
    assert {v["check"] for v in _violations(report)} == {"lease_token_order"}
    assert [(v["rows"]["run_ids"], v["rows"]["lease_tokens"]) for v in _violations(report)] == [
        (falling, [2, 1]),
        (repeated, [1, 1]),
    ]


def test_a_cancelled_occurrence_whose_run_still_runs_is_reported(cli, client, database_url) -> None:
    t = _now(database_url)
    task = shell_task(client)
    occ = _occurrence(database_url, task.id, 1, status="cancelled", scheduled_for=t - MINUTE)
    run = _run(database_url, occ, token=1, start=t - MINUTE, end=None)
    done = _occurrence(database_url, task.id, 2, status="cancelled", scheduled_for=t - SECOND)
    _run(database_url, done, token=1, start=t - SECOND, end=t, status="cancelled")

    code, report = _audit(cli)
    assert code == 1
    (v,) = _violations(report)
    assert v["check"] == "cancelled_run_still_running"
    assert v["rows"] == {"occurrence_id": occ, "task_id": task.id, "run_ids": [run]}


def test_a_run_started_before_its_spread_start_is_reported(cli, client, database_url) -> None:
    # --spread (issue 37 item 1): occurrence `early`'s run started 10 s after its nominal time
    # but 50 s before the start its dispatch drew (offset 1 min); `kept` started after its own.
    t = _now(database_url)
    task = shell_task(client)
    early = _occurrence(database_url, task.id, 1, scheduled_for=t - 3 * MINUTE)
    kept = _occurrence(database_url, task.id, 2, scheduled_for=t - 2 * MINUTE)
    query(
        database_url,
        "UPDATE occurrence SET spread_offset = interval '1 minute' RETURNING id",
    )
    run = _run(database_url, early, token=1, start=t - 3 * MINUTE + 10 * SECOND, end=t)
    _run(database_url, kept, token=1, start=t - MINUTE + SECOND, end=t)

    code, report = _audit(cli)
    assert code == 1
    (v,) = _violations(report)
    assert v["check"] == "started_before_spread"
    assert v["rows"]["run_id"] == run
    assert v["rows"]["occurrence_id"] == early
    assert _instant(v["rows"]["spread_start"]) == t - 2 * MINUTE
    assert "started 50.000s before its spread start" in v["message"]


# -- a real history ------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_real_daemons_history_is_clean_and_a_removed_firing_is_then_reported(
    spawn, cli, database_url
) -> None:
    assert cli("config", "set", "max-concurrent-runs", "3").code == 0
    at = (_now(database_url) + 3 * SECOND).isoformat()
    for args in (
        ("tick", "--every", "1s", "--command", "sleep 0.3"),
        ("queued", "--every", "1s", "--overlap", "queue", "--command", "sleep 0.1"),
        ("keyed-a", "--cron", "* * * * * *", "--overlap", "allow", "--concurrency-key", "k"),
        ("keyed-b", "--every", "1s", "--overlap", "allow", "--concurrency-key", "k"),
        ("once", "--at", at),
    ):
        extra = () if "--command" in args else ("--command", "true")
        assert cli("tasks", "add", *args, *extra).code == 0
    daemon = spawn(database_url, "audited", "--concurrency", "4")
    daemon.instance_id()
    wait_for(
        lambda: query(
            database_url,
            "SELECT 1 FROM task WHERE name = 'once' AND status = 'completed'",
        ),
        timeout=30,
        message="the one-shot task to complete",
    )
    wait_for(
        lambda: query(database_url, "SELECT count(*) >= 12 AS ok FROM run")[0]["ok"],
        message="a dozen runs",
    )
    assert daemon.stop() == 0, daemon.log()
    until = _now(database_url).isoformat()
    assert query(database_url, "SELECT id FROM run WHERE status = 'running'") == []

    code, report = _audit(cli, "--until", until, "--settle", "2s")
    assert (code, _violations(report), report["incomplete"]) == (0, [], [])
    assert report["checked"] == list(CHECK_NAMES)

    # The same history with one firing's row removed is no longer clean: the check has teeth.
    (gone,) = query(
        database_url,
        """
        SELECT o.id, o.scheduled_for FROM occurrence o JOIN task t ON t.id = o.task_id
        WHERE t.name = 'tick' AND o.trigger = 'schedule' AND o.scheduled_for < %s
        ORDER BY o.scheduled_for DESC LIMIT 1""",
        (_instant(until) - 3 * SECOND,),
    )
    query(database_url, "DELETE FROM run WHERE occurrence_id = %s", (gone["id"],))
    query(database_url, "DELETE FROM occurrence WHERE id = %s", (gone["id"],))
    code, report = _audit(cli, "--until", until, "--settle", "2s")
    assert code == 1
    (v,) = _violations(report)
    assert v["check"] == "firing_missing"
    assert _instant(v["rows"]["first_missing"]) == gone["scheduled_for"]


# -- the second snapshot ---------------------------------------------------------------------------
def test_a_violation_gone_by_the_second_snapshot_is_not_reported(
    client, pool, database_url
) -> None:
    """A buggy version that reported the first snapshot's findings (or never looked again) would
    report the duplicate that the hook removes between the two snapshots."""
    task = shell_task(client)
    # No index on occurrence keeps a scheduled firing unique (firing_key does, issue 47).
    at = _now(database_url) - MINUTE
    _occurrence(database_url, task.id, 1, scheduled_for=at)
    duplicate = _occurrence(database_url, task.id, 2, scheduled_for=at)
    calls: list[str] = []

    def keep(check: str) -> None:
        calls.append(check)

    def fix(check: str) -> None:
        calls.append(check)
        query(database_url, "DELETE FROM occurrence WHERE id = %s", (duplicate,))

    checks = ("firing_recorded_twice",)
    kept = Auditor(pool, checks=checks, between_snapshots=keep).run_once()
    assert [v.check for v in kept.violations] == ["firing_recorded_twice"]
    fixed = Auditor(pool, checks=checks, between_snapshots=fix).run_once()
    assert fixed.violations == ()
    assert calls == ["firing_recorded_twice", "firing_recorded_twice"]
    assert Auditor(pool, checks=checks, between_snapshots=keep).run_once().ok
    assert calls == ["firing_recorded_twice"] * 2  # nothing found: no second snapshot


def test_missing_firings_recorded_between_the_snapshots_are_not_reported(
    client, pool, database_url
) -> None:
    task, created = _backdated(client, database_url, "every10s", 10 * SECOND, ago="2 minutes")
    anchor = created["anchor_at"]
    for k in range(1, 13):
        if k not in (3, 6, 7):
            _occurrence(database_url, task.id, k, scheduled_for=anchor + k * 10 * SECOND)

    def dispatch_late(_check: str) -> None:  # a dispatcher catching up on firing 6 meanwhile
        _occurrence(database_url, task.id, 106, scheduled_for=anchor + 60 * SECOND)

    auditor = Auditor(pool, checks=("firing_missing",), between_snapshots=dispatch_late)
    report = auditor.run_once(until=anchor + 125 * SECOND)
    assert [(v.rows["first_missing"], v.rows["missing_count"]) for v in report.violations] == [
        (anchor + 30 * SECOND, 1),
        (anchor + 70 * SECOND, 1),
    ]


def test_each_check_reads_one_read_only_repeatable_read_snapshot(pool) -> None:
    import psycopg

    with transaction(pool, snapshot=True) as tx:
        isolation = tx.conn.execute("SHOW transaction_isolation").fetchone()
        read_only = tx.conn.execute("SHOW transaction_read_only").fetchone()
        assert (isolation, read_only) == (
            {"transaction_isolation": "repeatable read"},
            {"transaction_read_only": "on"},
        )
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            tx.conn.execute("DELETE FROM task")


# -- the command line ----------------------------------------------------------------------------
def test_a_clean_database_reports_clean_with_the_documented_json_shape(cli, database_url) -> None:
    result = cli("audit", "--since", "1h", "--json")
    assert result.code == 0, result.err
    report = result.json()
    assert set(report) == {
        "ok",
        "since",
        "until",
        "settle_seconds",
        "checked",
        "violations",
        "incomplete",
        "notices",
    }
    assert report["ok"] is True
    assert report["checked"] == list(CHECK_NAMES)
    assert report["settle_seconds"] == 30.0
    now = _now(database_url)
    assert abs(_instant(report["since"]) - (now - timedelta(hours=1))) < MINUTE
    assert abs(_instant(report["until"]) - now) < MINUTE
    only = cli("audit", "--check", "success_twice", "--check", "fifo_order", "--json").json()
    assert only["checked"] == ["fifo_order", "success_twice"]
    text = cli("audit", "--since", "2026-01-01T00:00:00")
    assert text.code == 0
    assert text.out.strip().startswith("audit: no violations in 12 check(s), since 2026-01-01")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--since", "nonsense"), "--since"),
        (("--until", "yesterday"), "--until"),
        (("--settle", "-1s"), "--settle"),
        (("--check", "everything"), "--check"),
        (("--since", "2030-01-02", "--until", "2030-01-01"), "is not before --until"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, args: tuple[str, ...], says: str) -> None:
    result = cli("audit", *args)
    assert result.code == 2
    assert result.out == ""
    assert len(result.err.strip().splitlines()) == 1
    assert result.err.startswith("error: ")
    assert says in result.err


def test_a_database_at_another_schema_revision_is_refused_in_one_line(
    cli, empty_database_url
) -> None:
    result = cli("audit", url=empty_database_url)
    assert result.code == 4  # EXIT_SCHEMA_BEHIND
    assert result.out == ""
    build = migration.build()
    assert result.err.strip().splitlines() == [
        f"error: the database schema is at nothing, this build (schema {build.head}) needs "
        f"{build.needs}; run `scheduler-daemon migrate` (audit reads history this build "
        "understands)"
    ]
