"""`scheduler-daemon tasks health` against real rows: each verdict from the rows its rule reads,
the window's counts and run figures, the fleet page unhealthy first and its cursor, bad input."""

from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.support import EVERY_MINUTE

pytestmark = pytest.mark.smoke


def add(cli: Any, name: str, *options: str) -> int:
    result = cli("tasks", "add", name, *(options or EVERY_MINUTE), "--json")
    assert result.code == 0, result.err
    return int(result.json()["id"])


def occurrence(
    db: Any,
    task_id: int,
    ago: timedelta,
    status: str,
    *,
    reason: str | None = None,
    trigger: str = "schedule",
    overlap: str = "forbid",
    firings: int = 1,
    run: tuple[timedelta, timedelta] | None = None,
) -> int:
    """An occurrence scheduled `ago` before the database's now; `run`: (queue wait, run time)
    of its one attempt, ended with its status (or still running when the status is)."""
    row = db.execute(
        """
        INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, last_scheduled_for,
            firing_count, trigger, overlap, status, reason, not_before, finished_at, attempts,
            lease_token)
        SELECT %(task)s,
            (SELECT coalesce(max(occurrence_seq), 0) + 1 FROM occurrence WHERE task_id = %(task)s),
            now() - %(ago)s,
            CASE WHEN %(firings)s > 1
                 THEN now() - %(ago)s + (%(firings)s - 1) * interval '1 minute' END,
            %(firings)s, %(trigger)s, %(overlap)s, %(status)s, %(reason)s, now() - %(ago)s,
            CASE WHEN %(status)s NOT IN ('queued', 'running') THEN now() - %(ago)s
                      + coalesce(%(wait)s::interval + %(took)s::interval, interval '0') END,
            CASE WHEN %(wait)s::interval IS NULL THEN 0 ELSE 1 END, 1
        RETURNING id""",
        {
            "task": task_id,
            "ago": ago,
            "firings": firings,
            "trigger": trigger,
            "overlap": overlap,
            "status": status,
            "reason": reason,
            "wait": run[0] if run else None,
            "took": run[1] if run else None,
        },
    ).fetchone()
    if run is not None:
        db.execute(
            """
            INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at,
                takeover_at, status, started_at, finished_at, build_revision)
            SELECT o.id, 1, 'test', 1, now() + interval '1 minute', now() + interval '2 minutes',
                o.status, o.scheduled_for + %(wait)s, o.finished_at, 'test'
            FROM occurrence o WHERE o.id = %(id)s""",
            {"id": row["id"], "wait": run[0]},
        )
    return int(row["id"])


def ran(db: Any, task_id: int, ago: timedelta, status: str = "success", took: float = 1) -> int:
    return occurrence(db, task_id, ago, status, run=(timedelta(0), timedelta(seconds=took)))


def health(cli: Any, *args: str) -> Any:
    result = cli("tasks", "health", *args, "--json")
    assert result.code == 0, result.err
    return result.json()


MIN = timedelta(minutes=1)


def test_the_last_three_attempts_failed_is_failing_and_comes_first(cli, db) -> None:
    ok, bad = add(cli, "a-ok"), add(cli, "b-bad")
    ran(db, bad, 30 * MIN)  # older than the last three: does not save it
    for i in reversed(range(3)):  # oldest first: sequence follows time
        ran(db, ok, (i + 2) * MIN)
        ran(db, bad, (i + 2) * MIN, "timeout" if i == 0 else "failed")
    rows = health(cli)
    assert [(r["name"], r["verdict"]) for r in rows] == [("b-bad", "failing"), ("a-ok", "healthy")]
    bad_row = rows[0]
    assert bad_row["cause"] == "the last 3 attempts failed or timed out"
    assert (bad_row["ran"], bad_row["failed"], bad_row["timed_out"]) == (4, 2, 1)
    assert bad_row["last_failure_at"] is not None
    assert bad_row["last_success_at"] is not None
    assert health(cli, "b-bad", "--failing-after", "4")["verdict"] == "healthy"


def test_an_expired_firing_or_a_skip_outside_the_tasks_policy_is_losing_firings(cli, db) -> None:
    expired = add(cli, "expired")
    occurrence(db, expired, 5 * MIN, "expired", reason="start_deadline")
    policy = add(cli, "policy")  # forbid, run_once: overlap and coalesced skips are its own
    occurrence(db, policy, 5 * MIN, "skipped", reason="overlap")
    occurrence(db, policy, 30 * MIN, "skipped", reason="coalesced", firings=20)
    misfired = add(cli, "misfired")  # misfired is what `--misfire skip` writes, not run_once
    occurrence(db, misfired, 30 * MIN, "skipped", reason="misfired", firings=40)
    by_name = {r["name"]: r for r in health(cli)}
    assert by_name["expired"]["verdict"] == "losing firings"
    assert by_name["expired"]["cause"] == "1 expired in the window"
    assert by_name["expired"]["expired"] == {"start_deadline": 1}
    assert by_name["policy"]["verdict"] == "healthy"
    assert by_name["policy"]["skipped"] == {"coalesced": 20, "overlap": 1}
    assert by_name["misfired"]["cause"] == "40 skipped (misfired) in the window"
    assert by_name["misfired"]["expected_firings"] == 40  # a summary row's every firing
    # Out of the window, the same rows lose nothing.
    assert health(cli, "misfired", "--window", "10m")["verdict"] == "healthy"


def test_a_firing_owed_past_its_grace_or_queued_past_its_deadline_is_late(cli, db) -> None:
    owed = add(cli, "owed")  # every minute, grace 1 minute
    db.execute(
        "UPDATE task SET next_run_at = date_trunc('minute', now()) - interval '5 minutes'"
        " WHERE id = %s",
        (owed,),
    )
    row = health(cli, "owed")
    assert row["verdict"] == "late"
    assert row["cause"].startswith("a firing due ")
    assert "(grace 60s)" in row["cause"]
    assert row["owed_firings"] == 6
    assert row["expected_firings"] == 6
    queued = add(cli, "queued", *EVERY_MINUTE, "--start-deadline", "2m")
    occurrence(db, queued, 3 * MIN, "queued")
    assert health(cli, "queued")["cause"] == "1 queued past the start deadline"
    occurrence(db, add(cli, "young", *EVERY_MINUTE, "--start-deadline", "2m"), MIN, "queued")
    assert health(cli, "young")["verdict"] == "healthy"


def test_parked_and_paused_tasks_say_so_and_sort_after_the_unhealthy(cli, db) -> None:
    add(cli, "a-fine")
    add(cli, "b-paused", *EVERY_MINUTE, "--paused")
    parked = add(cli, "c-parked")
    db.execute(
        "UPDATE task SET parked_at = now(), park_error = 'bad zone' WHERE id = %s", (parked,)
    )
    late = add(cli, "d-late")
    db.execute("UPDATE task SET next_run_at = now() - interval '1 hour' WHERE id = %s", (late,))
    rows = health(cli)
    assert [(r["name"], r["verdict"]) for r in rows] == [
        ("d-late", "late"),
        ("c-parked", "parked"),
        ("b-paused", "paused"),
        ("a-fine", "healthy"),
    ]
    assert rows[1]["cause"] == "parked: bad zone"


def test_the_window_counts_its_firings_and_the_runs_queue_wait_run_time_and_overlong(
    cli, db
) -> None:
    task = add(cli, "stats")
    ran(db, task, 25 * timedelta(hours=1))  # before the window
    for i in reversed(range(10)):  # one a minute; the oldest ran 90 s: past the next firing
        took = timedelta(seconds=90 if i == 9 else 10)
        occurrence(db, task, (i + 2) * MIN, "success", run=(timedelta(seconds=i), took))
    occurrence(db, task, 3 * MIN, "success", trigger="manual", run=(timedelta(0), MIN))
    row = health(cli, "stats")
    assert (row["expected_firings"], row["ran"], row["succeeded"]) == (10, 11, 11)
    assert row["sampled_runs"] == 10  # the firings' runs, not the manual one's
    assert row["outlasting_runs"] == 1
    assert row["queue_wait_p50_seconds"] == pytest.approx(4.5)
    assert row["run_time_p50_seconds"] == pytest.approx(10)
    assert row["run_time_p99_seconds"] == pytest.approx(10 + 80 * 0.91, abs=0.01)  # interpolated
    assert datetime.fromisoformat(row["next_run_at"]) > datetime.fromisoformat(
        row["last_success_at"]
    )
    assert row["window_seconds"] == 86_400
    text = cli("tasks", "health", "stats")
    assert "verdict                 healthy" in text.out


def test_the_fleet_is_paged_unhealthy_first_with_a_cursor(cli, db) -> None:
    for name in ("e", "d", "c", "b", "a"):
        add(cli, name)
    bad = add(cli, "z")
    occurrence(db, bad, MIN, "expired", reason="start_deadline")
    seen, after = [], None
    while True:
        result = cli(
            "tasks", "health", "--limit", "2", "--json", *(["--after", after] if after else [])
        )
        assert result.code == 0, result.err
        seen += [r["name"] for r in result.json()]
        if len(result.json()) < 2:
            break
        after = f"{5 if seen[-1] != 'z' else 1}:{seen[-1]}"
    assert seen == ["z", "a", "b", "c", "d", "e"]
    assert [r["name"] for r in health(cli, "--all")] == seen


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nope",), "error: unknown task 'nope'"),
        (("--window", "40d"), "error: --window 40d is past its limit (31d)"),
        (("--window", "soon"), "error: Invalid value for '--window': invalid duration 'soon'"),
        (("--after", "late-ones"), "error: --after 'late-ones' is not a cursor"),
        (("--failing-after", "0"), "error: --failing-after must be at least 1"),
        (("--failing-after", "101"), "error: --failing-after must be at most 100"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(cli, counts, args, message) -> None:
    add(cli, "t")
    before = counts()
    result = cli("tasks", "health", *args)
    assert result.code == 2
    assert result.out == ""
    assert result.err.startswith(message)
    assert result.err.count("\n") == 1
    assert counts() == before


def test_a_deleted_task_has_no_health(cli, db) -> None:
    task = add(cli, "gone")
    assert cli("tasks", "delete", "gone").code == 0
    result = cli("tasks", "health", str(task))
    assert (result.code, result.err) == (2, "error: unknown task '1' (deleted)\n")
