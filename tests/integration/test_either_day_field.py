"""`#`, a weekday's `L` and `W` beside a restricted other day field follow "either day field
matches" (issue 38 item 4, ADR 0019, revision 0026) against a real database: `tasks add/update/
apply/next` take and show them; they are refused while a build before revision 0026, which
fires them as croniter reads them, is registered (ADR 0010's pattern, its race forced); `audit`
judges the history of each definition by the reading it was fired by; and migration 0026 starts
the new reading with a baseline row for each such task."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from scheduler_daemon.domain import control
from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.storage import migration
from scheduler_daemon.storage.error import Conflict
from tests.support import OLD_INSTANCE, query, wait_for, write_during_registration

CRON = "0 0 8 * 5#3"  # the issue's: refused as "never fires" before
ADD = ("tasks", "add", "x", "--cron", CRON, "--command", "true")
REFUSED = (
    f"error: task 'x' cannot have --cron '{CRON}' while instance(s) old-a (host old-host, "
    f"version 0.9.0, schema 0025) of builds before schema {control.EITHER_DAYS_SINCE} are "
    "registered (they fire it only on days both day fields match, or never: not on a day either "
    "one matches); roll them to this build, or wait until a stopped one's row expires\n"
)


@pytest.fixture
def old_instance(db) -> str:
    db.execute(OLD_INSTANCE, ("old-a", "0025"))
    return "old-a"


def test_the_issues_expression_is_taken_and_fires_on_the_8th_and_third_fridays(cli) -> None:
    added = cli(*ADD, "--json")
    assert added.code == 0, added.err
    assert added.json()["cron"] == CRON
    shown = cli("tasks", "next", "x", "-n", "6", "--json")
    assert shown.code == 0, shown.err
    fired = [datetime.fromisoformat(row["utc"]) for row in shown.json()]
    days = [(t.day, t.isoweekday()) for t in fired]
    # Each is the 8th, or a Friday (5) between the 15th and the 21st: the third one.
    assert all(d == 8 or (w == 5 and 15 <= d <= 21) for d, w in days), days
    assert {d == 8 for d, _ in days} == {True, False}
    assert fired == sorted(fired)


def test_it_is_refused_beside_an_older_build_and_taken_once_it_left(
    cli, counts, db, old_instance, tmp_path: Path
) -> None:
    before = counts()
    refused = cli(*ADD)
    assert (refused.code, refused.err, refused.out) == (2, REFUSED, "")
    assert counts() == before
    # What an older build reads the same way is not refused: plain fields, `#` alone.
    assert cli("tasks", "add", "x", "--cron", "0 0 8 * 5", "--command", "true").code == 0
    assert cli("tasks", "add", "y", "--cron", "0 0 * * 5#3", "--command", "true").code == 0
    before = counts()
    updated = cli("tasks", "update", "x", "--cron", CRON)
    assert (updated.code, updated.err) == (2, REFUSED)
    path = tmp_path / "tasks.toml"
    path.write_text(f'[x]\ncommand = "true"\ncron = "{CRON}"\n')
    applied = cli("tasks", "apply", "-f", str(path), "--source", "s", "--adopt")
    assert applied.code == 2
    assert "cannot have --cron" in applied.err
    assert "old-a" in applied.err
    assert counts() == before
    db.execute(OLD_INSTANCE, ("new-a", migration.head_revision()))
    db.execute("DELETE FROM instance WHERE id = 'old-a'")
    assert cli("tasks", "update", "x", "--cron", CRON).code == 0


def test_an_older_build_registering_while_such_a_task_is_added_is_seen_and_refuses_it(
    client, database_url, counts
) -> None:
    """A registration in progress holds the compatibility lock shared and has inserted its
    (uncommitted) row; the add must wait for it and see the row. Fails against a check that
    reads the instances without that lock: it sees no row and commits the task beside a build
    that would fire it on third Fridays that are the 8th, that is never."""
    before = counts()
    spec = TaskSpec(name="x", executor="shell", target="true", cron=CRON)
    error = write_during_registration(
        database_url, lambda: client.add_task(spec), "old-late", "0025"
    )
    assert isinstance(error, Conflict), error
    assert "old-late (host old-host, version 0.9.0, schema 0025)" in str(error)
    assert counts() == {**before, "instance": before["instance"] + 1}


def _event(url: str, task_id: int, at: datetime, *, either_days: bool | None) -> None:
    query(
        url,
        """
        INSERT INTO task_event (task_id, at, kind, schedule_kind, cron_expr, anchor_at,
            timezone, dst_gap, dst_overlap, active, either_days)
        VALUES (%s, %s, 'changed', 'cron', '0 0 16,18 * 3#3', %s, 'UTC', 'shift', 'first', true,
            %s)""",
        (task_id, at, at, either_days),
    )


def _fired(url: str, task_id: int, days: list[datetime]) -> None:
    for seq, day in enumerate(days, start=1):
        query(
            url,
            """
            INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap,
                status, not_before, created_at, updated_at, finished_at)
            VALUES (%s, %s, %s, 'schedule', 'forbid', 'success', %s, %s, %s, %s)""",
            (task_id, seq, day, day, day, day, day + timedelta(seconds=1)),
        )


def test_audit_judges_each_definition_by_the_reading_it_was_fired_by(
    cli, client, database_url
) -> None:
    """2026-02-01 to 2026-05-01 (UTC) of `0 0 16,18 * 3#3`, fired only on the third Wednesdays
    (Feb 18, Mar 18, Apr 15), as an older build fires it. Judged by the old reading (an event
    written before revision 0026: `either_days` NULL) that is clean; by the new one, the 16th,
    Mar 18's neighbours and April's are missing."""
    task = client.add_task(
        TaskSpec(name="w", executor="shell", target="true", cron="0 0 16,18 * 3#3", paused=True)
    )
    query(database_url, "DELETE FROM task_event WHERE task_id = %s", (task.id,))
    _event(database_url, task.id, datetime(2026, 2, 1, tzinfo=UTC), either_days=None)
    _fired(
        database_url,
        task.id,
        [datetime(2026, m, d, tzinfo=UTC) for m, d in ((2, 18), (3, 18), (4, 15))],
    )
    window = ("--since", "2026-02-01T00:00:00Z", "--until", "2026-05-01T00:00:00Z")
    old = cli("audit", "--json", "--check", "firing_missing", *window)
    assert (old.code, old.json()["violations"]) == (0, []), old.out
    query(database_url, "UPDATE task_event SET either_days = true WHERE task_id = %s", (task.id,))
    new = cli("audit", "--json", "--check", "firing_missing", *window)
    assert new.code == 1, new.out
    missing = sorted(
        (v["rows"]["first_missing"], v["rows"]["missing_count"]) for v in new.json()["violations"]
    )
    assert missing == [
        ("2026-02-16T00:00:00+00:00", 1),
        ("2026-03-16T00:00:00+00:00", 1),
        ("2026-04-16T00:00:00+00:00", 2),  # the 16th and the 18th, nothing owed between
    ]


def test_migration_0026_starts_the_new_reading_with_a_baseline_for_such_tasks(
    empty_database_url: str,
) -> None:
    migration.upgrade(empty_database_url, "0025")
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        for name, cron in (("split", CRON), ("plain", "0 0 8 * 5"), ("nth", "0 0 * * 5#3")):
            conn.execute(
                """
                INSERT INTO task (name, schedule_kind, cron_expr, anchor_at, executor, payload,
                    next_run_at, created_at, updated_at)
                VALUES (%s, 'cron', %s, now(), 'shell', '{"command": "true"}', now(), now(),
                    now())""",
                (name, cron),
            )
    migration.upgrade(empty_database_url)
    rows = query(
        empty_database_url,
        "SELECT t.name, e.kind, e.either_days FROM task_event e JOIN task t ON t.id = e.task_id"
        " ORDER BY e.id",
    )
    created = [(r["name"], r["either_days"]) for r in rows if r["kind"] == "created"]
    assert created == [("split", None), ("plain", None), ("nth", None)]  # the old reading
    baselines = [(r["name"], r["either_days"]) for r in rows if r["kind"] == "baseline"]
    # A superset of the tasks the rule changes (`5#3` alone reads the same either way).
    assert baselines == [("split", True), ("nth", True)]
    later = query(
        empty_database_url,
        "UPDATE task SET cron_expr = '0 0 9 * 5#3' WHERE name = 'split' RETURNING id",
    )
    (event,) = query(
        empty_database_url,
        "SELECT either_days FROM task_event WHERE task_id = %s ORDER BY id DESC LIMIT 1",
        (later[0]["id"],),
    )
    assert event["either_days"] is True  # every row written from now on: the column's default


def test_an_update_to_such_a_cron_takes_the_compatibility_lock_before_the_task_lock(
    client, database_url
) -> None:
    """Session B holds the compatibility lock, as `migrate --contract` or another field's write
    does, and then wants the task's row. The update must wait for the compatibility lock before
    it locks the task: B then gets the row at once. Fails against an update that locked the task
    first and the compatibility lock after (the order the merge of 689fd94 left): B waits on the
    task, the update on B's lock, and PostgreSQL aborts one of them as a deadlock."""
    import threading

    task = client.add_task(
        TaskSpec(name="t", executor="shell", target="true", cron="0 0 1 * *", timezone="UTC")
    )
    failures: list[BaseException] = []

    def update() -> None:
        try:
            client.update_task(task.id, cron="0 0 16,18 * 3#3")
        except BaseException as exc:  # handed to the test thread
            failures.append(exc)

    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (migration.COMPAT_LOCK_KEY,))
        updating = threading.Thread(target=update)
        updating.start()
        wait_for(
            lambda: query(
                database_url,
                "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
            ),
            message="the update to wait for the compatibility lock",
        )
        holder.execute("SET LOCAL lock_timeout = '5s'")
        holder.execute("SELECT 1 FROM task WHERE id = %s FOR UPDATE", (task.id,))
    updating.join(30)
    assert not updating.is_alive()
    assert failures == []
    (row,) = query(database_url, "SELECT cron_expr FROM task WHERE id = %s", (task.id,))
    assert row["cron_expr"] == "0 0 16,18 * 3#3"
