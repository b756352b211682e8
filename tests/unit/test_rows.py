"""The typed rows the stores return: built from a row by name, each field a column of its table."""

import re
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path

import pytest

from scheduler_daemon.domain.claim import Claim, Launched
from scheduler_daemon.domain.instance import Instance
from scheduler_daemon.domain.occurrence import ExpiredClaim, Occurrence
from scheduler_daemon.domain.run import HistoryRow, Run, RunDetail
from scheduler_daemon.domain.status import OccurrenceStatus
from scheduler_daemon.storage.query import QUERIES

SCHEMA = (Path(__file__).parents[2] / "sql" / "schema.sql").read_text()
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _columns(table: str) -> set[str]:
    body = re.search(rf"^CREATE TABLE {table} \((.*?)^\);", SCHEMA, re.M | re.S)
    assert body is not None, table
    return {
        line.split()[0]
        for line in body[1].splitlines()
        if line.strip() and not line.strip().startswith("CONSTRAINT")
    }


@pytest.mark.parametrize(
    ("row_type", "table", "not_columns"),
    [
        (Occurrence, "occurrence", {"task_name"}),
        (Run, "run", set()),
        (Instance, "instance", {"silent_for", "compatible"}),
    ],
)
def test_each_field_of_a_typed_row_is_a_column_of_its_table(row_type, table, not_columns) -> None:
    # A renamed or dropped column fails here instead of as a TypeError in a running daemon.
    names = {f.name for f in fields(row_type)}
    assert names - not_columns <= _columns(table)
    assert not_columns <= names


def _occurrence_row(**changes: object) -> dict[str, object]:
    row: dict[str, object] = dict.fromkeys(_columns("occurrence"))
    row |= {
        "id": 7,
        "task_id": 3,
        "occurrence_seq": 1,
        "scheduled_for": NOW,
        "firing_count": 1,
        "trigger": "manual",
        "overlap": "forbid",
        "status": "queued",
        "attempts": 0,
        "interruptions": 0,
        "lease_token": 0,
        "not_before": NOW,
        "created_at": NOW,
        "updated_at": NOW,
    }
    return row | changes


def test_from_row_ignores_the_columns_a_select_star_adds_and_types_the_status() -> None:
    occurrence = Occurrence.from_row(_occurrence_row(first_claim_snapshot="1:1:", task_name="t"))
    assert occurrence.status is OccurrenceStatus.QUEUED
    assert (occurrence.id, occurrence.task_name) == (7, "t")
    assert Occurrence.from_row(_occurrence_row()).task_name is None  # not joined: its default


def test_from_row_refuses_a_row_without_a_field_that_has_no_default() -> None:
    with pytest.raises(TypeError):
        ExpiredClaim.from_row({"id": 1, "task_id": 2})
    assert ExpiredClaim.from_row({"id": 1, "task_id": 2, "lease_token": 5}).lease_token == 5


def test_a_status_outside_the_vocabulary_is_refused() -> None:
    with pytest.raises(ValueError, match="'exploded'"):
        Occurrence.from_row(_occurrence_row(status="exploded"))


def _select_list(sql: str) -> list[str]:
    """The output names of the first SELECT … FROM run r in `sql` (alias, else the column);
    a parenthesized subquery in its list (the reader's masked arguments) counts as one item."""
    sql = re.sub(r"\(SELECT [^()]*\)", "[]", sql)  # a one-level subquery: one item
    body = re.search(r"SELECT ((?:(?!SELECT).)*?)\s+FROM run r\b", sql, re.S)
    assert body is not None
    items, depth, current = [], 0, ""
    for ch in body[1]:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    return [re.split(r"\s+AS\s+|\.", " ".join(item.split()))[-1] for item in items]


def test_the_three_history_queries_select_one_column_list_the_documented_shape() -> None:
    # Would fail against run_get's old `r.*` (an `owner` the view renamed) or a history list
    # whose order or aliases drift from the run row of docs/cli.md.
    run_row = [f.name for f in fields(HistoryRow)]
    detail = [f.name for f in fields(RunDetail)]
    assert _select_list(QUERIES["run_history"].sql) == run_row
    assert _select_list(QUERIES["run_get"].sql) == detail
    assert _select_list(QUERIES["run_list_for_occurrence"].sql) == detail
    assert detail[: len(run_row)] == run_row


def test_a_claim_row_reads_as_its_claim_and_its_run_each_field_a_column_of_the_claim() -> None:
    # One mapping, by name: would fail against a field the claim function does not return, or
    # a hand-built Launched that read the occurrence's id as its run's.
    returns = re.search(r"sd_claim_launch_v6\(.*?\n RETURNS TABLE\((.*?)\)\n", SCHEMA)
    assert returns is not None
    columns = [column.split()[0] for column in returns[1].split(", ")]
    # `unreadable` is no column: the per-row decoding sets it (claim.claimed).
    assert {f.name for f in fields(Claim) + fields(Launched)} - {"unreadable"} <= set(columns)
    # The claim selects every column the function returns, its jsonb as text (issue 44).
    selected = re.search(
        r"SELECT (.*?)\s+FROM sd_claim_launch", QUERIES["occurrence_claim_launch"].sql, re.S
    )
    assert selected is not None
    assert [item.split()[-1] for item in selected[1].split(",")] == columns
    row = dict.fromkeys(columns) | {"id": 11, "run_id": 22, "lease_token": 3, "attempt": 2}
    claim, launched = Claim.from_row(row), Launched.from_row(row)
    assert (claim.id, claim.lease_token, launched.run_id, launched.attempt) == (11, 3, 22, 2)
