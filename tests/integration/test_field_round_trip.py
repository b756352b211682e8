"""Issue 37's and 38's fields, one table: each goes in through `tasks add`, comes out of
`--json` and `tasks export`, goes back in through `tasks apply -f` unchanged, and is changed and
cleared (or changed back) by `tasks update`. A field that one of these paths dropped or renamed
fails its row here."""

from pathlib import Path
from typing import Any

import pytest

# (options to add with, the --json field and its value, the line export writes,
#  an update and the value it gives, the update that clears it and the value after)
FIELDS = [
    pytest.param(
        ("--every", "1h", "--spread", "5m"),
        ("spread_seconds", 300),
        'spread = "5m"',
        (("--spread", "10m"), 600),
        (("--spread", "none"), None),
        id="spread",
    ),
    pytest.param(
        ("--every", "1h", "--max-attempts", "3", "--backoff", "5s", "--backoff-max", "10m"),
        ("backoff_max_seconds", 600),
        'backoff-max = "10m"',
        (("--backoff-max", "1h"), 3600),
        (("--backoff-max", "none"), None),
        id="backoff-max",
    ),
    pytest.param(
        ("--every", "1h", "--overlap", "replace"),
        ("overlap", "replace"),
        'overlap = "replace"',
        (("--overlap", "queue"), "queue"),
        (("--overlap", "replace"), "replace"),
        id="overlap-replace",
    ),
    pytest.param(
        ("--every", "1h", "--exclude-calendar", "b", "--exclude-calendar", "a"),
        ("exclude_calendars", ["a", "b"]),
        'exclude-calendars = ["a", "b"]',
        (("--exclude-calendar", "b"), ["b"]),
        (("--exclude-calendar", "none"), []),
        id="exclude-calendars",
    ),
]


@pytest.mark.parametrize(("add", "shown", "exported", "update", "clear"), FIELDS)
def test_a_field_round_trips_through_add_json_export_apply_and_update(
    cli: Any,
    tmp_path: Path,
    *,
    add: tuple[str, ...],
    shown: tuple[str, Any],
    exported: str,
    update: tuple[tuple[str, ...], Any],
    clear: tuple[tuple[str, ...], Any],
) -> None:
    field, value = shown
    for calendar in ("a", "b"):  # the calendars --exclude-calendar names (ADR 0025)
        assert cli("calendars", "add", calendar, "--date", "2030-12-25").code == 0
    added = cli("tasks", "add", "t", *add, "--command", "true", "--json")
    assert added.code == 0, added.err
    assert added.json()[field] == value
    text = cli("tasks", "export").out
    assert exported in text.splitlines(), text

    assert cli("tasks", "delete", "t").code == 0
    path = tmp_path / "tasks.toml"
    path.write_text(text)
    applied = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert applied.code == 0, applied.err
    assert cli("tasks", "show", "t", "--json").json()[field] == value
    assert cli("tasks", "export").out == text  # what apply stored exports the same

    for options, after in (update, clear):
        changed = cli("tasks", "update", "t", *options)
        assert changed.code == 0, changed.err
        assert cli("tasks", "show", "t", "--json").json()[field] == after
