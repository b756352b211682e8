"""The text layout of the commands' output: aligned tables and `key: value` pairs of the
documented fields (presentation.py), with the columns each table shows."""

import unicodedata
from typing import Any

# Shown as they are in text output: they lay out a job's multi-line output.
_LAYOUT = frozenset("\n\t")
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs"})


def printable(text: str, *, keep: frozenset[str] = _LAYOUT) -> str:
    """`text` with each control, format or surrogate character except those in `keep` written
    as Python writes it in a repr (`\\x1b`, `\\u202e`), so that text from a job or a name
    cannot drive the terminal it is printed on."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(
        c if c in keep or unicodedata.category(c) not in _UNPRINTABLE else repr(c)[1:-1]
        for c in text
    )


def cell(value: Any) -> str:
    """One table cell: empty for None, on one line."""
    return "" if value is None else printable(str(value), keep=frozenset())


RUN_COLUMNS = (
    "id",
    "occurrence_id",
    "task_name",
    "scheduled_for",
    "trigger",
    "attempt",
    "status",
    "reason",
    "instance_id",
    "duration_seconds",
    "error_summary",
)
TASK_COLUMNS = (
    "id",
    "name",
    "schedule",
    "timezone",
    "executor",
    "status",
    "paused",
    "next_run_at",
    "last_status",
)
HEALTH_COLUMNS = (
    "name",
    "verdict",
    "expected_firings",
    "ran",
    "failed",
    "timed_out",
    "run_time_p99_seconds",
    "next_run_at",
    "cause",
)
INSTANCE_COLUMNS = (
    "id",
    "state",
    "version",
    "schema_revision",
    "compatible",
    "slots",
    "clock_drift_seconds",
    "silent_for_seconds",
    "takeover_bound_seconds",
    "stopping",
)


def table(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """An aligned text table; empty cells for None."""
    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def pairs(record: dict[str, Any]) -> str:
    """One `key: value` line per field, for `show` commands."""
    width = max(len(k) for k in record)
    return "\n".join(f"{k.ljust(width)}  {'' if v is None else v}" for k, v in record.items())


def run_table(rows: list[dict[str, Any]]) -> str:
    """History rows (their documented fields) as a table: a pending cancel shows in the status
    column."""
    shown = [
        {**r, "status": "running (cancel requested)"} if r.get("cancel_requested_at") else r
        for r in rows
    ]
    return table(shown, RUN_COLUMNS)
