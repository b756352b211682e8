"""`--backoff-max` (issue 37 item 2) as a task field: add, update, apply, export and `--json`
carry it; bad input is one line, exit 2, nothing written."""

from datetime import timedelta
from pathlib import Path

import pytest

ADD = ("tasks", "add", "t", "--every", "1h", "--command", "false", "--max-attempts", "5")


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
