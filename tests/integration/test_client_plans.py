"""EXPLAIN guards for the Client's statements over a seeded table: the one-statement find-and-lock
is an index lookup whether it is given an id or a name (an OR of the two forms could fall back to
a scan of every task), and the bulk occurrence insert reads no existing occurrence."""

import re

import psycopg
import pytest

from scheduler_daemon.storage import query as queries
from tests.integration.test_query_plans import seeded  # noqa: F401 - the seeded fixture

# A manual firing queued by a test, as the trigger statements take it.
QUEUED = {"overlap": "allow", "concurrency_key": None, "status": "queued", "requested_by": "test"}


def _plan(url: str, name: str, params: dict) -> str:
    with psycopg.connect(url, prepare_threshold=None) as conn:  # as the Client sends it
        rows = conn.execute(f"EXPLAIN {queries.QUERIES[name].sql}", params).fetchall()
        conn.rollback()
    return "\n".join(r[0] for r in rows)


@pytest.mark.parametrize(
    ("params", "index"),
    [({"id": None, "name": "t5"}, "task_name_key"), ({"id": 5, "name": "5"}, "task_pkey")],
)
def test_find_and_lock_is_an_index_lookup_by_name_or_by_id(seeded, params, index) -> None:  # noqa: F811
    plan = _plan(seeded, "task_lock_ref", params)
    assert index in plan, plan
    assert _scans(plan) == [], plan


def _scans(plan: str) -> list[str]:
    """The plan's sequential scans but those of the empty calendar tables, which the task's
    calendar names (revision 0036) read here; test_task_list_plan holds that read to
    task_calendar's key at scale."""
    return [
        line
        for line in plan.splitlines()
        if "Seq Scan" in line and not re.search(r"Seq Scan on (task_calendar|calendar)\b", line)
    ]


def test_the_bulk_occurrence_insert_scans_no_table(seeded) -> None:  # noqa: F811
    from datetime import UTC, datetime

    params = {
        "task_id": 1,
        "first_seq": 1_000_001,
        "last_seq": 1_100_000,
        "now": datetime.now(UTC),
        "trigger": "manual",
        **QUEUED,
    }
    plan = _plan(seeded, "occurrence_insert_many", params)
    assert "Function Scan on generate_series" in plan, plan
    assert "Seq Scan" not in plan, plan
    # One probe of the task's key for its `needs_build` (ADR 0029), once per statement.
    assert re.findall(r"using (\w+)", plan) == ["task_pkey"], plan


def test_the_one_statement_trigger_reaches_its_task_by_primary_key_and_scans_nothing(
    seeded,  # noqa: F811
) -> None:
    from datetime import UTC, datetime

    from scheduler_daemon.domain.status import FINISHED

    params = {
        "task_id": 5,
        "channel": "test",
        "reason_woken": "triggered",
        "now": datetime.now(UTC),
        **QUEUED,
        "reason": None,
        "finished": list(FINISHED),
        "args": None,
    }
    plan = _plan(seeded, "occurrence_trigger", params)
    assert "Index Scan using task_pkey on task" in plan, plan
    assert "Seq Scan" not in plan, plan
    assert "on occurrence" not in plan.replace("Insert on occurrence", ""), plan


def test_the_task_insert_arbitrates_on_the_live_name_index_and_scans_nothing(
    seeded,  # noqa: F811
) -> None:
    from datetime import UTC, datetime, timedelta

    from psycopg.types.json import Jsonb

    from scheduler_daemon.domain.task import TaskSpec
    from scheduler_daemon.storage.task_store import _columns

    now = datetime.now(UTC)
    spec = TaskSpec(name="t5", executor="shell", target="true", every=timedelta(hours=1))
    params = {
        **_columns(spec.with_changes(anchor=now)),
        "payload": Jsonb({"command": "true"}),
        "next_run_at": now,
        "source": None,
        "needs_build": None,
        "channel": "test",
        "reason_woken": "task_added",
    }
    plan = _plan(seeded, "task_insert", params)
    assert "Conflict Arbiter Indexes: task_name_key" in plan, plan
    assert "Seq Scan" not in plan, plan
