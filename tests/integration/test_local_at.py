"""A one-shot's `--at` without an offset is read in its zone by its `--dst-gap` and
`--dst-overlap`, as cron reads its wall times (issue 38 item 4, ADR 0019), against a real
database, through `tasks add/update/next/export/apply` and `--json`; one skipped by a gap is
recorded skipped when written, ends `cancelled` (ADR 0006) and `audit` accepts it.

The instants come from tzdata's 2036 rules for America/New_York, worked out by hand: on
2036-03-09 (the second Sunday of March) the clocks jump from 02:00 EST to 03:00 EDT at 07:00 UTC,
so 02:30 does not exist; on 2036-11-02 (the first Sunday of November) they go back from 02:00 EDT
to 01:00 EST at 06:00 UTC, so 01:30 happens at 05:30 UTC (EDT), then at 06:30 UTC (EST)."""

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from scheduler_daemon.domain.status import TaskStatus
from scheduler_daemon.domain.task import TaskSpec
from tests.support import query

NY = ("--timezone", "America/New_York")
GAP, OVERLAP = "2036-03-09T02:30", "2036-11-02T01:30"


def _add(cli: Any, name: str, at: str, *options: str) -> Any:
    return cli("tasks", "add", name, "--at", at, *NY, *options, "--command", "true", "--json")


def _occurrences(url: str, name: str) -> list[tuple[str, str | None, datetime]]:
    rows = query(
        url,
        "SELECT o.status, o.reason, o.scheduled_for FROM occurrence o JOIN task t"
        " ON t.id = o.task_id WHERE t.name = %s ORDER BY o.occurrence_seq",
        (name,),
    )
    return [(r["status"], r["reason"], r["scheduled_for"]) for r in rows]


@pytest.mark.parametrize(
    ("at", "options", "fires"),
    [
        (GAP, (), "2036-03-09T07:00:00+00:00"),  # shift (the default): where the gap ends
        (GAP, ("--dst-gap", "shift"), "2036-03-09T07:00:00+00:00"),
        (OVERLAP, (), "2036-11-02T05:30:00+00:00"),  # first (the default)
        (OVERLAP, ("--dst-overlap", "second"), "2036-11-02T06:30:00+00:00"),
        # An offset makes it an instant: no policy re-reads it.
        ("2036-03-09T02:30-05:00", ("--dst-gap", "skip"), "2036-03-09T07:30:00+00:00"),
        ("2036-11-02T01:30-05:00", (), "2036-11-02T06:30:00+00:00"),
        (
            "2036-06-01T09:00",
            ("--dst-gap", "skip", "--dst-overlap", "both"),
            "2036-06-01T13:00:00+00:00",
        ),
    ],
)
def test_a_local_at_fires_where_the_policies_put_it(
    cli, database_url, at: str, options: tuple[str, ...], fires: str
) -> None:
    added = _add(cli, "a", at, *options)
    assert added.code == 0, added.err
    task = added.json()
    assert (task["at"], task["next_run_at"], task["status"]) == (fires, fires, "enabled")
    assert [row["utc"] for row in cli("tasks", "next", "a", "--json").json()] == [fires]
    assert _occurrences(database_url, "a") == []


def test_a_local_at_a_gap_skips_never_fires_and_ends_cancelled_when_written(
    cli, database_url
) -> None:
    added = _add(cli, "a", GAP, "--dst-gap", "skip")
    assert added.code == 0, added.err
    task = added.json()
    assert (task["at"], task["next_run_at"], task["status"]) == (
        "2036-03-09T07:00:00+00:00",
        None,
        "cancelled",
    )
    assert cli("tasks", "next", "a", "--json").json() == []
    # Its one firing, recorded skipped as the dispatcher records one (ADR 0006): never queued.
    assert _occurrences(database_url, "a") == [
        ("skipped", "dst_gap", datetime(2036, 3, 9, 7, tzinfo=UTC))
    ]
    shown = cli("tasks", "show", "a")
    assert "cancelled" in shown.out
    audit = cli("audit", "--json")
    assert (audit.code, audit.json()["violations"]) == (0, []), audit.out
    # Nothing to update: it has "fired" (ADR 0006's rule for a one-shot past `enabled`).
    again = cli("tasks", "update", "a", "--at", "2036-04-01T09:00")
    assert again.code == 2
    assert "already fired (cancelled)" in again.err


def test_both_at_a_time_that_happens_twice_is_one_line_exit_2_and_writes_nothing(
    cli, counts
) -> None:
    before = counts()
    refused = _add(cli, "a", OVERLAP, "--dst-overlap", "both")
    assert (refused.code, refused.out) == (2, "")
    assert refused.err == (
        "error: --at 2036-11-02T01:30:00 happens twice in America/New_York (05:30:00 and "
        "06:30:00 UTC) and a one-shot fires once: give --dst-overlap first or second, or an "
        "offset\n"
    )
    assert counts() == before


def test_update_reads_a_local_at_by_the_policies_the_task_has_after_it(
    cli, counts, database_url
) -> None:
    assert _add(cli, "a", "2036-01-01T09:00", "--dst-overlap", "second").code == 0
    moved = cli("tasks", "update", "a", "--at", OVERLAP, "--json")
    assert moved.json()["at"] == "2036-11-02T06:30:00+00:00"  # the stored `second`
    first = cli("tasks", "update", "a", "--at", OVERLAP, "--dst-overlap", "first", "--json")
    assert first.json()["at"] == "2036-11-02T05:30:00+00:00"  # the policy given with it
    # A policy alone re-reads nothing: the stored instant is an instant.
    kept = cli("tasks", "update", "a", "--dst-overlap", "second", "--json")
    assert kept.json()["at"] == "2036-11-02T05:30:00+00:00"
    before = counts()
    refused = cli("tasks", "update", "a", "--at", OVERLAP, "--dst-overlap", "both")
    assert refused.code == 2
    assert "happens twice in America/New_York" in refused.err
    assert counts() == before
    # From a cron task to a one-shot a gap swallows: cancelled by the update, firing recorded.
    assert cli("tasks", "add", "c", "--cron", "0 9 * * *", *NY, "--command", "true").code == 0
    skipped = cli("tasks", "update", "c", "--at", GAP, "--dst-gap", "skip", "--json").json()
    assert (skipped["schedule_kind"], skipped["status"], skipped["next_run_at"]) == (
        "once",
        "cancelled",
        None,
    )
    assert _occurrences(database_url, "c") == [
        ("skipped", "dst_gap", datetime(2036, 3, 9, 7, tzinfo=UTC))
    ]


def test_a_task_file_reads_a_local_at_by_its_policies_and_export_apply_keeps_a_skipped_one(
    cli, tmp_path: Path, database_url, counts
) -> None:
    path = tmp_path / "tasks.toml"
    path.write_text(
        f'[skip]\ncommand = "true"\nat = {GAP}:00\ntimezone = "America/New_York"\n'
        'dst-gap = "skip"\n\n'
        f'[second]\ncommand = "true"\nat = "{OVERLAP}"\ntimezone = "America/New_York"\n'
        'dst-overlap = "second"\n'
    )
    applied = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert applied.code == 0, applied.err
    assert cli("tasks", "show", "second", "--json").json()["at"] == "2036-11-02T06:30:00+00:00"
    skip = cli("tasks", "show", "skip", "--json").json()
    assert (skip["status"], skip["at"]) == ("cancelled", "2036-03-09T07:00:00+00:00")
    before = query(database_url, "SELECT * FROM task ORDER BY id")
    again = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert again.out.splitlines() == ["2 task(s) in the file, 0 change(s)"], again.err
    exported = cli("tasks", "export").out
    # Its instant alone would make a task that fires there: the gap's first wall time instead.
    assert "at = 2036-03-09T02:00:00\n" in exported
    assert "at = 2036-11-02T06:30:00+00:00\n" in exported
    path.write_text(exported)
    same = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert same.out.splitlines() == ["2 task(s) in the file, 0 change(s)"], same.err
    assert query(database_url, "SELECT * FROM task ORDER BY id") == before
    # Into a database without it (deleted here): skipped again, never enabled.
    assert cli("tasks", "delete", "skip").code == 0
    readded = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert readded.out.splitlines()[0] == "+ added skip", readded.err
    skip = cli("tasks", "show", "skip", "--json").json()
    assert (skip["status"], skip["next_run_at"]) == ("cancelled", None)
    path.write_text(
        f'[both]\ncommand = "true"\nat = "{OVERLAP}"\ntimezone = "America/New_York"\n'
        'dst-overlap = "both"\n'
    )
    before_counts = counts()
    bad = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert bad.code == 2
    assert bad.err.startswith("error: task 'both': --at 2036-11-02T01:30:00 happens twice")
    assert counts() == before_counts


def test_a_file_that_makes_an_enabled_one_shot_skip_its_gap_records_the_skip(
    cli, tmp_path: Path, database_url
) -> None:
    # 03:00 exists: the instant where the gap ends, to fire.
    assert _add(cli, "g", "2036-03-09T03:00").json()["at"] == "2036-03-09T07:00:00+00:00"
    path = tmp_path / "tasks.toml"
    path.write_text(
        f'[g]\ncommand = "true"\nat = "{GAP}"\ntimezone = "America/New_York"\ndst-gap = "skip"\n'
    )
    applied = cli("tasks", "apply", "-f", str(path), "--source", "s", "--adopt")
    assert applied.out.splitlines()[0] == "~ adopted g: at, dst_gap", applied.err
    task = cli("tasks", "show", "g", "--json").json()
    assert (task["status"], task["at"]) == ("cancelled", "2036-03-09T07:00:00+00:00")
    assert _occurrences(database_url, "g") == [
        ("skipped", "dst_gap", datetime(2036, 3, 9, 7, tzinfo=UTC))
    ]


def test_add_tasks_reads_each_local_at_and_records_the_skipped_ones(client, database_url) -> None:
    def spec(name: str, gap: str) -> TaskSpec:
        at = datetime(2036, 3, 9, 2, 30)
        return TaskSpec(
            name=name, executor="shell", target="true", at=at, timezone=NY[1], dst_gap=gap
        )

    skipped, shifted = client.add_tasks([spec("skipped", "skip"), spec("shifted", "shift")])
    assert (skipped.status, skipped.next_run_at) == (TaskStatus.CANCELLED, None)
    assert (shifted.status, shifted.next_run_at) == (
        TaskStatus.ENABLED,
        datetime(2036, 3, 9, 7, tzinfo=UTC),
    )
    assert _occurrences(database_url, "skipped") == [
        ("skipped", "dst_gap", datetime(2036, 3, 9, 7, tzinfo=UTC))
    ]
    assert _occurrences(database_url, "shifted") == []


def test_audit_accepts_a_skipped_one_shot_whose_instant_passed_and_owes_a_shifted_one(
    cli, client, database_url
) -> None:
    """2026-03-08 02:30 in New York did not exist (07:00 UTC ended the gap). Both tasks are
    written as on 2026-03-01 (the Client's `now`, and their history's start moved there): the
    skipped one's firing has its row; the shifted one, with no daemon to run it, is owed."""
    then = datetime(2026, 3, 1, tzinfo=UTC)
    for name, gap in (("skipped", "skip"), ("shifted", "shift")):
        spec = TaskSpec(
            name=name,
            executor="shell",
            target="true",
            at=datetime(2026, 3, 8, 2, 30),
            timezone="America/New_York",
            dst_gap=gap,
        )
        client.add_task(spec, now=then)
    query(database_url, "UPDATE task_event SET at = %s, anchor_at = %s", (then, then))
    report = cli("audit", "--json")
    # No daemon ran: the shifted one's firing is at its next_run_at, owed, not missing (issue 44).
    assert report.code == 0, report.out
    assert report.json()["violations"] == []
    (owed,) = report.json()["notices"]
    assert (owed["notice"], owed["rows"]["first_owed"], owed["rows"]["owed_count"]) == (
        "owed",
        "2026-03-08T07:00:00+00:00",
        1,
    )
    assert owed["rows"]["task_id"] == client.get_task("shifted").id
