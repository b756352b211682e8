"""Exclusion calendars against a real database (ADR 0025): the `calendars` commands, a task's
`--exclude-calendar`, the dispatcher recording a run of excluded firings as one row as they fall
due, `tasks next` passing over them, `audit` finding them recorded, bad input (one line, exit
2, nothing written) and the roles' grants."""

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.services.dispatcher import Dispatcher
from tests.conftest import row_counts
from tests.support import EVERY_MINUTE, query

FIXTURES = Path(__file__).parents[1] / "fixtures"
ICS, BAD_ICS = FIXTURES / "weekly_maintenance.ics", FIXTURES / "not_a_calendar.ics"
CAL = ("--exclude-calendar",)
HOLIDAY = datetime(2030, 12, 25, tzinfo=UTC)


def _dispatch(pool: Any, now: datetime | None = None) -> Any:
    return Dispatcher(pool, instance_id="d", batch=10).run_once(now=now)


def _rows(url: str, name: str) -> list[dict[str, Any]]:
    return query(
        url,
        "SELECT o.scheduled_for, o.status, o.reason, o.firing_count, o.last_scheduled_for "
        "FROM occurrence o JOIN task t ON t.id = o.task_id WHERE t.name = %s "
        "ORDER BY o.scheduled_for",
        (name,),
    )


def _next_run_at(url: str, name: str) -> datetime:
    return query(url, "SELECT next_run_at FROM task WHERE name = %s", (name,))[0]["next_run_at"]


def test_calendars_are_added_listed_shown_replaced_and_deleted(cli, db) -> None:
    added = cli(
        "calendars",
        "add",
        "hol",
        "--date",
        "2030-12-25",
        "--range",
        "2030-12-30..2031-01-01",
        "--json",
    )
    assert added.code == 0, added.err
    assert (added.json()["date_count"], added.json()["source_kind"]) == (4, "dates")
    ics = cli("calendars", "add", "maint", "--ics", str(FIXTURES / "weekly_maintenance.ics"))
    assert ics.code == 0, ics.err
    listed = {c["name"]: c for c in cli("calendars", "list", "--json").json()}
    assert set(listed) == {"hol", "maint"}
    assert (listed["maint"]["source_kind"], listed["maint"]["date_count"]) == ("ics", 8)
    shown = cli("calendars", "show", "hol", "--json").json()
    assert shown["days"] == ["2030-12-25", "2030-12-30", "2030-12-31", "2031-01-01"]
    assert shown["tasks"] == []
    # --replace rewrites the dates (a task's next dispatch reads the new ones).
    again = cli("calendars", "add", "hol", "--date", "2030-12-24", "--replace", "--json")
    assert again.code == 0, again.err
    assert cli("calendars", "show", "hol", "--json").json()["days"] == ["2030-12-24"]
    assert query_count(db, "calendar_date") == 1 + 8
    assert cli("calendars", "delete", "hol").code == 0
    assert [c["name"] for c in cli("calendars", "list", "--json").json()] == ["maint"]
    assert query_count(db, "calendar_date") == 8  # its dates went with it


def query_count(db: psycopg.Connection[Any], table: str) -> int:
    return db.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("calendars", "add", "x", "--date", "2030-02-30"), "is not a date"),
        (("calendars", "add", "x", "--range", "2030-12-26..2030-12-24"), "ends before it starts"),
        (("calendars", "add", "x"), "give the calendar's dates"),
        (("calendars", "add", "x", "--ics", str(BAD_ICS)), "not a valid iCalendar"),
        (("calendars", "add", "x", "--ics", "/nonexistent.ics"), "cannot read it"),
        (("calendars", "add", "x", "--ics", str(ICS), "--date", "2030-01-01"), "not both"),
        (("calendars", "add", "hol", "--date", "2030-01-01"), "already exists"),
        (("calendars", "add", "123", "--date", "2030-01-01"), "not all digits"),
        (("calendars", "delete", "nope"), "unknown calendar 'nope'"),
        (("calendars", "delete", "hol"), "in use by task(s) t"),
        (("tasks", "add", "u", *EVERY_MINUTE, *CAL, "nope"), "unknown calendar 'nope'"),
        (("tasks", "add", "u", *EVERY_MINUTE, *CAL, "hol", *CAL, "hol"), "given twice"),
        (("tasks", "update", "t", "--exclude-calendar", "nope"), "unknown calendar 'nope'"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_exit_2_and_nothing_written(cli, db, args, says) -> None:
    assert cli("calendars", "add", "hol", "--date", "2030-12-25").code == 0
    assert cli("tasks", "add", "t", *EVERY_MINUTE, "--exclude-calendar", "hol").code == 0
    before = row_counts(db)
    result = cli(*args)
    assert result.code == 2, result.out
    assert says in result.err
    assert result.err.count("\n") == 1
    assert row_counts(db) == before
    assert cli("tasks", "show", "t", "--json").json()["exclude_calendars"] == ["hol"]


def test_a_holiday_of_an_every_minute_task_is_one_excluded_row_and_the_other_task_runs(
    cli, pool, database_url
) -> None:
    assert cli("calendars", "add", "xmas", "--date", "2030-12-25").code == 0
    shown = cli("tasks", "add", "held", *EVERY_MINUTE, "--exclude-calendar", "xmas", "--json")
    assert shown.code == 0, shown.err
    assert shown.json()["exclude_calendars"] == ["xmas"]
    assert cli("tasks", "add", "free", *EVERY_MINUTE).code == 0
    query(database_url, "UPDATE task SET next_run_at = %s", (HOLIDAY,))

    result = _dispatch(pool, HOLIDAY + timedelta(seconds=30))
    assert result.queued == 1  # `free` only
    assert result.skipped == 1  # only what is due: nothing is recorded ahead
    # A pass every hour of the day (each within the newest 200 firings): every one extends the
    # same row, so the holiday is one row of 1,440 firings, written as they fall due.
    for hour in range(1, 25):
        _dispatch(pool, HOLIDAY + timedelta(hours=hour, seconds=30))
    rows = _rows(database_url, "held")
    (row, after) = rows
    assert (row["status"], row["reason"], row["scheduled_for"]) == ("skipped", "excluded", HOLIDAY)
    assert row["firing_count"] == 1440
    assert row["last_scheduled_for"] == HOLIDAY + timedelta(hours=23, minutes=59)
    assert (after["scheduled_for"], after["status"]) == (HOLIDAY + timedelta(days=1), "queued")
    assert _next_run_at(database_url, "held") == HOLIDAY + timedelta(days=1, minutes=1)
    assert "queued" in [r["status"] for r in _rows(database_url, "free")]
    # No notification for an excluded firing: it is the task's own calendar at work.
    assert query(database_url, "SELECT count(*) AS n FROM notification_outbox")[0]["n"] == 0


def test_inside_a_holiday_a_cleared_calendar_or_a_pause_applies_at_the_next_pass(
    cli, client, pool, database_url
) -> None:
    """Nothing is recorded before it is due (ADR 0025, found by review): a run recorded ahead to
    the next free firing kept a task silent until then after its calendar was cleared, and a
    pause and resume inside it planned firings the run already held (two rows for one firing,
    or a firing both run and counted excluded)."""
    assert cli("calendars", "add", "xmas", "--date", "2030-12-25").code == 0
    added = cli("tasks", "add", "held", *EVERY_MINUTE, "--misfire", "run_once", *CAL, "xmas")
    assert added.code == 0, added.err
    query(database_url, "UPDATE task SET next_run_at = %s", (HOLIDAY,))
    _dispatch(pool, HOLIDAY + timedelta(minutes=10, seconds=30))
    client.pause("held", now=HOLIDAY + timedelta(minutes=20, seconds=30))
    client.resume("held", now=HOLIDAY + timedelta(minutes=40, seconds=30))
    _dispatch(pool, HOLIDAY + timedelta(minutes=50, seconds=30))
    client.update_task("held", exclude_calendars=(), now=HOLIDAY + timedelta(minutes=54))
    _dispatch(pool, HOLIDAY + timedelta(minutes=55, seconds=30))
    rows = [
        (r["scheduled_for"] - HOLIDAY, r["status"], r["reason"], r["firing_count"])
        for r in _rows(database_url, "held")
    ]
    minute = timedelta(minutes=1)
    coalesced = [(m * minute, "skipped", "coalesced", 1) for m in range(51, 55)]
    assert rows == [
        (0 * minute, "skipped", "excluded", 11),  # 00:00-00:10, as they fell due
        (11 * minute, "skipped", "paused", 10),  # what the pause found due
        (41 * minute, "skipped", "excluded", 10),  # after the resume: a new run, no overlap
        *coalesced,  # cleared: the next pass decides by the misfire policy alone
        (55 * minute, "queued", None, 1),
    ]


def test_a_calendar_change_applies_from_the_next_dispatch_and_recorded_rows_stay(
    cli, pool, database_url
) -> None:
    assert cli("calendars", "add", "c", "--date", "2030-12-25").code == 0
    assert cli("tasks", "add", "t", "--cron", "0 9 * * *", "--command", "true", *CAL, "c").code == 0
    query(database_url, "UPDATE task SET next_run_at = %s", (HOLIDAY + timedelta(hours=9),))
    _dispatch(pool, HOLIDAY + timedelta(hours=9))
    assert cli("calendars", "add", "c", "--date", "2030-12-26", "--replace").code == 0
    _dispatch(pool, HOLIDAY + timedelta(days=1, hours=9))
    # Consecutive excluded firings, whichever date excluded each, are one row.
    rows = [
        (r["scheduled_for"].day, r["reason"], r["firing_count"]) for r in _rows(database_url, "t")
    ]
    assert rows == [(25, "excluded", 2)]
    # Cleared: the next firing runs.
    assert cli("tasks", "update", "t", "--exclude-calendar", "none").code == 0
    _dispatch(pool, HOLIDAY + timedelta(days=2, hours=9))
    assert [r["status"] for r in _rows(database_url, "t")][-1] == "queued"


def test_tasks_next_passes_over_the_excluded_firings_and_says_why(
    cli, client, database_url
) -> None:
    assert cli("calendars", "add", "hol", "--range", "2030-12-25..2030-12-26").code == 0
    noon = ("--cron", "0 12 * * *", "--command", "true")
    assert cli("tasks", "add", "t", *noon, *CAL, "hol").code == 0
    got = client.next_firings("t", 2, now=datetime(2030, 12, 24, 13, tzinfo=UTC))
    assert [(f.at.day, f.excluded_before, f.excluded_by) for f in got] == [
        (27, 2, ("hol",)),
        (28, 0, ()),
    ]
    # The CLI on the database clock: a calendar of the next three dates (UTC).
    today = query(database_url, "SELECT (now() AT TIME ZONE 'UTC')::date AS d")[0]["d"]
    span = f"{today}..{today + timedelta(days=2)}"
    assert cli("calendars", "add", "soon", "--range", span).code == 0
    assert cli("tasks", "update", "t", "--exclude-calendar", "soon").code == 0
    shown = cli("tasks", "next", "t", "-n", "1", "--json").json()
    assert shown[0]["utc"].startswith(str(today + timedelta(days=3)))
    assert shown[0]["excluded_before"] >= 2
    assert shown[0]["excluded_by"] == ["soon"]
    text = cli("tasks", "next", "t", "-n", "1").out
    assert "excluded firing(s) on dates of calendar(s) soon" in text.splitlines()[-1]


def test_audit_finds_excluded_firings_owed_and_recorded_never_missing(
    cli, client, pool, database_url
) -> None:
    today = query(database_url, "SELECT (now() AT TIME ZONE 'UTC')::date AS d")[0]["d"]
    span = f"{today - timedelta(days=1)}..{today + timedelta(days=1)}"
    assert cli("calendars", "add", "off", "--range", span).code == 0
    task = client.add_task(
        TaskSpec(name="ten", executor="shell", target="true", every=timedelta(seconds=10),
                 exclude_calendars=("off",))
    )  # fmt: skip
    # Ten minutes of owed history (as test_audit does): every firing on an excluded date.
    for table, column in (("task_event", "task_id"), ("task", "id")):
        query(
            database_url,
            f"UPDATE {table} SET anchor_at = anchor_at - interval '10 minutes' WHERE {column} = %s",
            (task.id,),
        )
    query(database_url, "UPDATE task_event SET at = at - interval '10 minutes'")
    query(database_url, "UPDATE task SET next_run_at = anchor_at + interval '10 seconds'")
    _dispatch(pool)
    (row,) = _rows(database_url, "ten")
    assert row["reason"] == "excluded"
    assert row["firing_count"] >= 59  # the ten minutes, as they fell due (none ahead)
    result = cli("audit", "--json", "--check", "firing_missing")
    assert result.code == 0, result.out
    assert result.json()["violations"] == []
    # The summary row is what covers them: without it they are missing.
    query(database_url, "DELETE FROM occurrence")
    missing = cli("audit", "--json", "--check", "firing_missing")
    assert missing.code == 1
    # The ten minutes' firings but the newest, which audit's settle window does not owe yet.
    assert missing.json()["violations"][0]["rows"]["missing_count"] >= 50


def test_the_roles_operator_writes_calendars_daemon_and_reader_read_them(cli, database_url) -> None:
    from scheduler_daemon.storage.database import make_pool
    from tests.role_fleet import role_fleet

    with role_fleet(database_url) as fleet:
        operator = fleet.url(fleet.names.operator)
        daemon, reader = fleet.url(fleet.names.daemon), fleet.url(fleet.names.reader)
        added = cli("calendars", "add", "xmas", "--date", "2030-12-25", url=operator)
        assert added.code == 0, added.err
        task = cli("tasks", "add", "t", *EVERY_MINUTE, "--exclude-calendar", "xmas", url=operator)
        assert task.code == 0, task.err
        assert [c["name"] for c in cli("calendars", "list", "--json", url=reader).json()] == [
            "xmas"
        ]
        for url in (daemon, reader):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                query(url, "DELETE FROM calendar_date")
        query(database_url, "UPDATE task SET next_run_at = %s", (HOLIDAY,))
        pool = make_pool(daemon, max_size=1, name="daemon-role")
        pool.open(wait=True)
        try:
            assert _dispatch(pool, HOLIDAY).skipped == 1
        finally:
            pool.close()
        refused = cli("calendars", "delete", "xmas", url=operator)
        assert (refused.code, "in use by task(s) t" in refused.err) == (2, True)


def test_an_excluded_firing_owes_no_deadline_notification(cli, pool, database_url) -> None:
    assert cli("calendars", "add", "xmas", "--date", "2030-12-25").code == 0
    notify = ("--notify", "http://127.0.0.1:9/n", "--notify-on", "deadline", "--deadline", "1m")
    for name, extra in (("held", ("--exclude-calendar", "xmas")), ("free", ())):
        added = cli(
            "tasks", "add", name, "--cron", "0 9 * * *", "--command", "true", *notify, *extra
        )
        assert added.code == 0, added.err
    query(database_url, "UPDATE task SET next_run_at = %s", (HOLIDAY + timedelta(hours=9),))
    # Recorded past their deadline: the dispatch's own check (ADR 0016) leaves `held` out.
    _dispatch(pool, HOLIDAY + timedelta(hours=9, minutes=5))
    # The reconcile scan over the window of both deadlines leaves it out too.
    from scheduler_daemon.storage import outbox_store

    with psycopg.connect(database_url) as conn:
        after, until = HOLIDAY, HOLIDAY + timedelta(days=1)
        outbox_store.enqueue_deadlines(conn, after=after, until=until, limit=100)
    rows = query(
        database_url,
        "SELECT t.name FROM notification_outbox n JOIN task t ON t.id = n.task_id "
        "WHERE n.event = 'deadline'",
    )
    assert [r["name"] for r in rows] == ["free"]


def _blocked(url: str, holder_pid: int) -> bool:
    """Whether some session waits on a lock `holder_pid` holds."""
    rows = query(
        url, "SELECT 1 FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (holder_pid,)
    )
    return bool(rows)


def test_a_delete_waiting_on_a_link_not_yet_committed_is_refused_naming_the_task(
    cli, client, database_url
) -> None:
    """The race: a second session links a task to the calendar (holding its FOR KEY SHARE) and
    commits while `calendars delete` waits for the calendar's lock. Fails on a delete that read
    the calendar's users in the locking statement (its snapshot predates the link: the delete
    then meets the RESTRICT foreign key, a database error, not the one-line refusal)."""
    import threading

    from scheduler_daemon.storage.error import Conflict
    from tests.support import wait_for

    assert cli("calendars", "add", "c", "--date", "2030-12-25").code == 0
    assert cli("tasks", "add", "t", *EVERY_MINUTE).code == 0
    errors: list[BaseException] = []
    with psycopg.connect(database_url) as holder:
        holder.execute(
            "INSERT INTO task_calendar SELECT t.id, c.id FROM task t, calendar c "
            "WHERE t.name = 't' AND c.name = 'c'"
        )

        def delete() -> None:
            try:
                client.delete_calendar("c")
            except BaseException as exc:
                errors.append(exc)

        deleting = threading.Thread(target=delete)
        deleting.start()
        wait_for(lambda: _blocked(database_url, holder.info.backend_pid), message="the wait")
        holder.commit()
        deleting.join(10)
    assert len(errors) == 1
    assert isinstance(errors[0], Conflict), errors[0]
    assert "in use by task(s) t" in str(errors[0])
    assert [c["name"] for c in cli("calendars", "list", "--json").json()] == ["c"]


def test_a_link_waiting_on_a_delete_is_refused_in_one_line(cli, database_url, db) -> None:
    """The other order: a second session deletes the calendar (holding its row) while `tasks
    update --exclude-calendar` waits to link it; once the delete commits, the update is one line,
    exit 2, nothing written. Fails on an update that let the foreign key's error through."""
    import threading

    from tests.support import wait_for

    assert cli("calendars", "add", "c", "--date", "2030-12-25").code == 0
    assert cli("tasks", "add", "t", *EVERY_MINUTE).code == 0
    results: list[Any] = []
    with psycopg.connect(database_url) as holder:
        holder.execute("DELETE FROM calendar WHERE name = 'c'")
        updating = threading.Thread(
            target=lambda: results.append(cli("tasks", "update", "t", "--exclude-calendar", "c"))
        )
        updating.start()
        wait_for(lambda: _blocked(database_url, holder.info.backend_pid), message="the wait")
        holder.commit()
        updating.join(10)
    (result,) = results
    assert result.code == 2
    assert "--exclude-calendar" in result.err
    assert result.err.count("\n") == 1
    assert query_count(db, "task_calendar") == 0


def test_a_firing_not_yet_dispatched_on_an_excluded_date_owes_no_deadline(
    cli, database_url
) -> None:
    """The reconcile scan of firings not yet dispatched (a parked task, a dispatch lagging after
    an outage) skips a firing on a date its task's calendars exclude, as the dispatcher's check
    does. Fails without the calendar condition in outbox_enqueue_unrecorded_deadlines (found by
    review: "not dispatched within its deadline of 10 s")."""
    from scheduler_daemon.storage import outbox_store

    today = query(database_url, "SELECT (now() AT TIME ZONE 'UTC')::date AS d")[0]["d"]
    assert cli("calendars", "add", "today", "--date", str(today)).code == 0
    notify = ("--notify", "http://127.0.0.1:9/n", "--notify-on", "deadline", "--deadline", "10s")
    for name, extra in (("held", (*CAL, "today")), ("free", ())):
        added = cli("tasks", "add", name, "--every", "1h", "--command", "true", *notify, *extra)
        assert added.code == 0, added.err
    # Their firing is today, a minute ago (or at midnight), and no dispatcher has reached it.
    query(
        database_url,
        "UPDATE task SET next_run_at = greatest(now() - interval '1 minute',"
        " (now() AT TIME ZONE 'UTC')::date::timestamp AT TIME ZONE 'UTC')",
    )
    with psycopg.connect(database_url) as conn:
        outbox_store.enqueue_unrecorded_deadlines(conn, limit=100)
    rows = query(
        database_url,
        "SELECT t.name FROM notification_outbox n JOIN task t ON t.id = n.task_id "
        "WHERE n.event = 'deadline'",
    )
    assert [r["name"] for r in rows] == ["free"]


def _ics_file(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "hostile.ics"
    event = "".join(f"{line}\r\n" for line in ("UID:h@test", *lines))
    path.write_bytes(
        f"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//t//EN\r\nBEGIN:VEVENT\r\n{event}"
        "END:VEVENT\r\nEND:VCALENDAR\r\n".encode()
    )
    return str(path)


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        (("DTSTART:19000101T000000Z", "RRULE:FREQ=SECONDLY"), "repeats within a day"),
        (
            ("DTSTART;VALUE=DATE:20000229", "EXDATE;VALUE=DATE:20000229",
             "RRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30"),
            "fall on no date from",
        ),
    ],
    ids=["secondly-from-1900", "never-occurs"],
)  # fmt: skip
def test_calendars_add_refuses_a_hostile_ics_file_in_one_line_within_seconds(
    cli, db, tmp_path: Path, lines, says: str
) -> None:
    """Issue 44 (KNOWN-FAILURES 42): the issue's 161-byte file grew past 1.2 GB in 92 s, and a
    rule that never occurs made a calendar of no dates. Each is one line, exit 2, nothing written,
    and the refusal comes within seconds (a guard, not a performance test)."""
    import time

    before = row_counts(db)
    began = time.monotonic()
    result = cli("calendars", "add", "x", "--ics", _ics_file(tmp_path, *lines))
    assert time.monotonic() - began < 15
    assert result.code == 2, result
    assert says in result.err
    assert result.err.startswith("error: the iCalendar")
    assert result.err.count("\n") == 1
    assert row_counts(db) == before


def test_calendars_add_reads_weekends_since_1900_within_seconds(cli, tmp_path: Path) -> None:
    """A weekly rule from 1900 (business days only): the old expansion walked the horizon 15
    minutes at a time, each window stepping the rule from 1900 again, for minutes."""
    import time

    path = _ics_file(tmp_path, "DTSTART;VALUE=DATE:19000106", "RRULE:FREQ=WEEKLY;BYDAY=SA,SU")
    began = time.monotonic()
    done = cli("calendars", "add", "weekends", "--ics", path, "--json")
    assert time.monotonic() - began < 15
    assert done.code == 0, done.err
    shown = done.json()
    assert shown["date_count"] in (626, 627, 628)  # the weekend days of six years from today
    assert shown["source_kind"] == "ics"
