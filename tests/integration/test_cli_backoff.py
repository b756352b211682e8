"""`--backoff-max` (issue 37 item 2) as a task field: add, update, apply, export and `--json`
carry it; bad input is one line, exit 2, nothing written; refused while a build before schema
0028, which would retry after the fixed backoff, is registered (ADR 0010's pattern, its race
forced)."""

from datetime import timedelta
from pathlib import Path

import pytest

from scheduler_daemon.domain import control
from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.storage import migration
from scheduler_daemon.storage.error import Conflict
from tests.support import OLD_INSTANCE, write_during_registration

ADD = ("tasks", "add", "t", "--every", "1h", "--command", "false", "--max-attempts", "5")
REFUSED = (
    "error: task 't' cannot have --backoff-max while instance(s) old-a (host old-host, version "
    f"0.9.0, schema 0025) of builds before schema {control.BACKOFF_MAX_SINCE} are registered "
    "(they would retry it after the fixed --backoff every time); roll them to this build, or "
    "wait until a stopped one's row expires\n"
)


def test_backoff_max_round_trips_through_add_update_export_apply_and_json(
    cli, db, tmp_path: Path
) -> None:
    added = cli(*ADD, "--backoff", "5s", "--backoff-max", "10m", "--json")
    assert added.code == 0, added.err
    assert (added.json()["backoff_seconds"], added.json()["backoff_max_seconds"]) == (5, 600)
    exported = cli("tasks", "export").out
    assert 'backoff-max = "10m"' in exported
    assert cli("tasks", "update", "t", "--backoff-max", "1h").code == 0
    assert cli("tasks", "show", "t", "--json").json()["backoff_max_seconds"] == 3600
    cli("tasks", "delete", "t")
    path = tmp_path / "tasks.toml"
    path.write_text(exported)
    applied = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert applied.code == 0, applied.err
    (row,) = db.execute("SELECT backoff, backoff_max FROM task WHERE deleted_at IS NULL")
    assert row == {"backoff": timedelta(seconds=5), "backoff_max": timedelta(minutes=10)}
    assert cli("tasks", "update", "t", "--backoff-max", "none").code == 0
    assert cli("tasks", "show", "t", "--json").json()["backoff_max_seconds"] is None


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (("--backoff", "30s", "--backoff-max", "10s"), "--backoff-max 10s is below --backoff 30s"),
        (("--backoff", "0s", "--backoff-max", "1m"), "--backoff-max needs a --backoff above zero"),
        (("--backoff-max", "0s"), "--backoff-max"),
        (("--backoff-max", "soon"), "--backoff-max"),
    ],
)
def test_a_bad_backoff_max_is_one_line_exit_2_and_writes_nothing(
    cli, counts, options: tuple[str, ...], error: str
) -> None:
    before = counts()
    result = cli(*ADD, *options)
    assert (result.code, result.out) == (2, "")
    assert result.err.count("\n") == 1, result.err
    assert error in result.err
    assert counts() == before


def test_an_update_that_puts_the_backoff_above_its_max_is_refused(cli, db) -> None:
    assert cli(*ADD, "--backoff", "5s", "--backoff-max", "1m").code == 0
    result = cli("tasks", "update", "t", "--backoff", "2m")
    assert (result.code, result.err) == (2, "error: --backoff-max 1m is below --backoff 2m\n")
    (row,) = db.execute("SELECT backoff FROM task")
    assert row["backoff"] == timedelta(seconds=5)


def test_backoff_max_is_refused_while_an_older_build_is_registered(
    cli, counts, db, tmp_path: Path
) -> None:
    db.execute(OLD_INSTANCE, ("old-a", "0025"))
    before = counts()
    result = cli(*ADD, "--backoff-max", "10m")
    assert (result.code, result.err, result.out) == (2, REFUSED, "")
    assert counts() == before
    assert cli(*ADD).code == 0  # without it: not refused
    updated = cli("tasks", "update", "t", "--backoff-max", "10m")
    assert (updated.code, updated.err) == (2, REFUSED)
    path = tmp_path / "tasks.toml"
    path.write_text('[u]\ncommand = "true"\nevery = "1h"\nbackoff-max = "1m"\n')
    applied = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert applied.code == 2
    assert "old-a" in applied.err
    assert db.execute(
        "SELECT count(*) AS n FROM task WHERE backoff_max IS NOT NULL"
    ).fetchone() == {"n": 0}
    db.execute(OLD_INSTANCE, ("new-a", migration.head_revision()))
    db.execute("DELETE FROM instance WHERE id = 'old-a'")
    assert cli("tasks", "update", "t", "--backoff-max", "10m").code == 0


def test_an_older_build_registering_while_a_doubling_task_is_added_is_seen_and_refuses_it(
    client, database_url, counts
) -> None:
    """A registration in progress holds the compatibility lock shared and has inserted its
    (uncommitted) row; the add must wait for it and see the row. Fails against a check that
    reads the instances without that lock: it sees no row and commits the task beside a build
    that would retry it after the fixed backoff."""
    before = counts()
    spec = TaskSpec(
        name="t",
        executor="shell",
        target="true",
        every=timedelta(hours=1),
        backoff=timedelta(seconds=5),
        backoff_max=timedelta(minutes=10),
    )
    error = write_during_registration(
        database_url, lambda: client.add_task(spec), "old-late", "0025"
    )
    assert isinstance(error, Conflict), error
    assert "old-late (host old-host, version 0.9.0, schema 0025)" in str(error)
    assert counts() == {**before, "instance": before["instance"] + 1}
