"""The vocabulary against the schema: each enum is its CHECK list in sql/schema.sql, each named set
of statuses is the list its partial indexes and the statements in sql/*.sql write out, and every
status or policy literal the SQL compares with is one the enums know. A value added on one side
only fails here."""

import re
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest

from scheduler_daemon.domain import status
from scheduler_daemon.domain.status import (
    ACTIVE,
    EXECUTING,
    FAILED_OUTCOMES,
    FINISHED,
    KEYED_TRIGGERS,
    LOST,
    NEEDS_REASON,
    NOT_STARTED,
    OWN_HISTORY_ROW,
    ActionSource,
    CalendarSource,
    DstGapPolicy,
    DstOverlapPolicy,
    ExecutorKind,
    LostReason,
    MisfirePolicy,
    NotifyEvent,
    OccurrenceStatus,
    OperatorAction,
    OverlapPolicy,
    RunStatus,
    ScheduleKind,
    TaskEventKind,
    TaskStatus,
    Trigger,
)

SQL = Path(__file__).resolve().parents[2] / "sql"
SCHEMA = (SQL / "schema.sql").read_text()
QUERY_FILES = sorted(p for p in SQL.glob("*.sql") if p.name != "schema.sql")

# CHECK constraint → the enum or set that is its list.
CHECKS: dict[str, type[StrEnum] | tuple[str, ...]] = {
    "occurrence_status_check": OccurrenceStatus,
    "occurrence_trigger_check": Trigger,
    "occurrence_overlap_check": OverlapPolicy,
    "occurrence_finished_check": FINISHED,
    "occurrence_reason_check": NEEDS_REASON,
    "occurrence_cancel_check": NOT_STARTED,
    "run_status_check": RunStatus,
    "task_status_check": TaskStatus,
    "task_last_status_check": FINISHED,
    "task_overlap_check": OverlapPolicy,
    "task_misfire_check": MisfirePolicy,
    "task_dst_gap_check": DstGapPolicy,
    "task_dst_overlap_check": DstOverlapPolicy,
    "task_schedule_kind_check": ScheduleKind,
    "task_executor_check": ExecutorKind,
    "task_event_kind_check": TaskEventKind,
    "notification_outbox_event_check": NotifyEvent,
    "operator_action_action_check": OperatorAction,
    "operator_action_source_check": ActionSource,
    "calendar_source_kind_check": CalendarSource,
    "firing_key_trigger_check": KEYED_TRIGGERS,
}
# Partial indexes keep their predicates written out (a generic plan could not match a parameter
# against them); these are the sets they spell.
INDEXES = {
    "occurrence_forbid_active_key": ACTIVE,
    "occurrence_key_active_idx": ACTIVE,
    "occurrence_task_active_idx": ACTIVE,
    "occurrence_key_executing_key": EXECUTING,
    "occurrence_queue_executing_key": EXECUTING,
    "occurrence_replace_executing_key": EXECUTING,
    "occurrence_executing_idx": EXECUTING,
    "occurrence_own_row_idx": OWN_HISTORY_ROW,
    "occurrence_lost_idx": LOST,
    "occurrence_task_failure_idx": FAILED_OUTCOMES,
    # The default partition's copies of the parent's (issue 47).
    "occurrence_active_lost_idx": LOST,
    "occurrence_active_task_failure_idx": FAILED_OUTCOMES,
}
NAMED_SETS = {
    "ACTIVE": ACTIVE,
    "EXECUTING": EXECUTING,
    "OWN_HISTORY_ROW": OWN_HISTORY_ROW,
    "LOST": LOST,
    "FAILED_OUTCOMES": FAILED_OUTCOMES,
    "KEYED_TRIGGERS": KEYED_TRIGGERS,
}
# Column → the values a literal compared with it may take, in the statements and the schema.
COLUMNS: dict[str, set[str]] = {
    "status": {*OccurrenceStatus, *RunStatus, *TaskStatus},
    "overlap": set(OverlapPolicy),
    "misfire": set(MisfirePolicy),
    "trigger": set(Trigger),
    "schedule_kind": set(ScheduleKind),
}


def _definitions(kind: str) -> dict[str, str]:
    """name → definition text of each CHECK constraint ("check") or index ("index")."""
    if kind == "check":
        pattern = r"^\s*CONSTRAINT (\w+) CHECK (.*?),?$"
    else:
        pattern = r"^CREATE (?:UNIQUE )?INDEX (\w+) ON .*? WHERE (.*);$"
    return dict(re.findall(pattern, SCHEMA, re.M))


def _lists(text: str) -> list[tuple[str, ...]]:
    """Every `ARRAY['a'::text, ...]` list in a schema definition."""
    return [tuple(re.findall(r"'(\w+)'::text", a)) for a in re.findall(r"ARRAY\[(.*?)\]", text)]


def _values(expected: type[StrEnum] | tuple[str, ...]) -> tuple[str, ...]:
    return tuple(str(v) for v in expected)


@pytest.mark.parametrize(
    ("kind", "name", "expected"),
    [("check", name, expected) for name, expected in CHECKS.items()]
    + [("index", name, expected) for name, expected in INDEXES.items()],
)
def test_each_check_and_partial_index_spells_its_enum_in_schema_order(
    kind: str, name: str, expected: type[StrEnum] | tuple[str, ...]
) -> None:
    """Each enum is the check list of its column, and each partial index spells its named
    set, in schema order."""
    (found,) = _lists(_definitions(kind)[name])
    assert found == _values(expected)


@pytest.mark.parametrize(("kind", "named"), [("check", CHECKS), ("index", INDEXES)])
def test_every_status_list_a_check_or_a_partial_index_holds_is_named(
    kind: str, named: dict[str, Any]
) -> None:
    """Every check list in the schema has its enum; every status list a partial index
    writes is checked."""
    listed = {name for name, text in _definitions(kind).items() if _lists(text)}
    assert listed == set(named)


def test_every_status_list_the_statements_write_out_is_a_named_set() -> None:
    found = [
        (path.name, tuple(re.findall(r"'(\w+)'", listed)))
        for path in QUERY_FILES
        for listed in re.findall(r"\bIN \(('[^)]*')\)", path.read_text())
    ]
    assert found, "no IN lists found; the test would pass vacuously"
    named = {v: k for k, v in NAMED_SETS.items()}
    assert [(source, values) for source, values in found if values not in named] == []


@pytest.mark.parametrize("column", COLUMNS)
def test_every_literal_compared_with_a_vocabulary_column_is_a_known_value(column) -> None:
    comparison = rf"\b{column}\)?\s*(?:=|<>)\s*'(\w+)'"
    texts = [SCHEMA, *(p.read_text() for p in QUERY_FILES)]
    literals = {v for text in texts for v in re.findall(comparison, text)}
    assert literals, f"no literal compared with {column}; the pattern is wrong"
    assert literals - COLUMNS[column] == set()


def test_the_named_sets_are_occurrence_statuses_and_final_is_the_rest() -> None:
    assert set(ACTIVE) | set(FINISHED) == set(OccurrenceStatus)
    assert set(EXECUTING) | set(NOT_STARTED) == set(ACTIVE)
    assert set(NEEDS_REASON) <= set(FINISHED)
    assert set(LOST) <= set(NEEDS_REASON)
    assert set(FAILED_OUTCOMES) <= set(FINISHED) - set(NEEDS_REASON)
    assert all(isinstance(s, OccurrenceStatus) for s in (*ACTIVE, *FINISHED, *NOT_STARTED))
    assert set(OWN_HISTORY_ROW) == set(NOT_STARTED) | set(NEEDS_REASON)


@pytest.mark.parametrize("outcome", list(status.OutcomeStatus))
@pytest.mark.parametrize("cancel", [None, "cancelled by x"])
@pytest.mark.parametrize(("attempts", "interruptions"), [(1, 0), (3, 0), (1, 3)])
def test_an_attempt_leaves_its_occurrence_queued_or_in_its_own_status(
    outcome, cancel, attempts, interruptions
) -> None:
    # `runs list` looks for an occurrence row only among OWN_HISTORY_ROW: every other status
    # an occurrence takes must come from a run of the same status.
    from datetime import timedelta

    from scheduler_daemon.domain.outcome import decide

    decision = decide(
        outcome,
        attempts=attempts,
        max_attempts=3,
        interruptions=interruptions,
        max_interruptions=3,
        backoff=timedelta(0),
        cancel_reason=cancel,
    )
    assert (
        decision.occurrence_status in OWN_HISTORY_ROW
        or decision.occurrence_status == decision.run_status
    )


def test_members_are_the_strings_rows_hold() -> None:
    assert OccurrenceStatus.QUEUED == "queued"
    assert f"{MisfirePolicy.RUN_ONCE}" == "run_once"
    assert {TaskStatus.ENABLED: 1}["enabled"] == 1
    assert "queued" in ACTIVE
    assert status.__doc__


def test_every_skip_or_expiry_reason_the_statements_write_is_a_lost_reason() -> None:
    # The per-task lost-firings gauge counts an unknown reason as `other`: a new one written in
    # SQL without its member would vanish into it.
    written = {
        reason
        for path in QUERY_FILES
        for reason in re.findall(r"\breason = '(\w+)'", path.read_text())
    }
    assert written, "no reason literal found; the pattern is wrong"
    assert written - set(LostReason) == set()


def test_the_default_notification_events_are_the_ones_outbox_enqueue_writes_out() -> None:
    from scheduler_daemon.domain.status import DEFAULT_NOTIFY_ON
    from scheduler_daemon.storage.query import QUERIES

    (listed,) = re.findall(r"ARRAY\[('[a-z]+'(?:, '[a-z]+')*)\]", QUERIES["outbox_enqueue"].sql)
    assert tuple(re.findall(r"'(\w+)'", listed)) == tuple(str(e) for e in DEFAULT_NOTIFY_ON)


def test_the_active_statuses_are_spelled_once_in_sql_and_match_active() -> None:
    # One fragment (sql/occurrence.sql's active_statuses) spells them for every statement: a
    # status added to ACTIVE and not to the fragment would make the statements disagree.
    from scheduler_daemon.storage.query import parse

    (fragment,) = [
        q
        for q in parse((SQL / "occurrence.sql").read_text(), "occurrence.sql")
        if q.name == "active_statuses"
    ]
    assert tuple(re.findall(r"'(\w+)'", fragment.sql)) == tuple(str(s) for s in ACTIVE)
    spelled = [p.name for p in QUERY_FILES if "'queued', 'launching', 'running'" in p.read_text()]
    assert spelled == ["occurrence.sql"]  # the fragment itself; claim_launch.sql aside
