"""`#`, a weekday's `L` and `W` beside a restricted other day field follow "either day field
matches" (issue 38 item 4, ADR 0019, revision 0026) against a real database: `tasks add/update/
apply/next` take and show them; `audit` judges the history of each definition by the reading it
was fired by; and migration 0026 starts the new reading with a baseline row for each such task."""

from datetime import UTC, datetime, timedelta

from scheduler_daemon.domain.task import TaskSpec
from tests.support import query

CRON = "0 0 8 * 5#3"  # the issue's: refused as "never fires" before
ADD = ("tasks", "add", "x", "--cron", CRON, "--command", "true")


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
