"""The clamps the daemon's statements apply to values written by hand (issue 28) are the bounds
every input takes (domain/limit.py): a value an input accepted is read unchanged, and only one
past them is clamped."""

import re
from pathlib import Path

from scheduler_daemon.domain import limit

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [p for p in sorted((ROOT / "sql").glob("*.sql")) if p.name != "schema.sql"] + sorted(
    (ROOT / "sql" / "functions").glob("*.sql")
)


def _found(pattern: str) -> set[str]:
    return {m for p in SOURCES for m in re.findall(pattern, p.read_text(encoding="utf-8"))}


def test_every_interval_cap_is_the_longest_duration_an_input_takes() -> None:
    caps = _found(r"interval '(\d+) days'")
    assert caps == {str(limit.MAX_DURATION.days)}
    assert not _found(r"interval '\d+ years'")  # compared as 360-day years: not MAX_DURATION


def test_the_budget_cap_is_the_largest_budget_an_input_takes() -> None:
    assert _found(r"floor\(value::numeric\), 0\), (\d+)\)") == {str(limit.MAX_CONCURRENT_RUNS)}
