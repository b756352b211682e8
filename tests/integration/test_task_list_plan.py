"""EXPLAIN guard for `tasks list` at 1,000,000 tasks (revision 0021): a page reads one page of
tasks by name and one backward read of occurrence_task_outcome_idx per task for its newest
outcome, and one probe of task_calendar's key per task for its calendars, never a scan of task,
occurrence or task_calendar.

Seeding a million tasks with their history takes minutes on a shared machine (6 min for 1 M
tasks and 2 M occurrences, docs/performance.md), so the guard seeds 5,000 tasks with two
finished occurrences each, ANALYZEs them, then tells the planner the tables hold 1,000,000 tasks
and 2,000,000 occurrences (`pg_class.reltuples` of the tables and their indexes: the planner
scales them to the pages it finds). The plan it then makes is the one measured on a real
1,000,000-task database (docs/performance.md, "The task row off the hot path"), node for node.
"""

import re

import psycopg
import pytest

from scheduler_daemon.storage import query as queries
from tests.support import query

TASKS, PER_TASK, SCALE = 5_000, 2, 200  # 5,000 x 200 = 1,000,000 tasks as the planner sees it
PAGE = {"after": None, "pattern": None, "status": None, "paused": None, "limit": 101}
# The plan on the real 1,000,000-task database, its costs left out (the same for both pages,
# the later page with an Index Cond on the name).
PLAN = [
    "Limit",
    "Nested Loop Left Join",
    # Each task's secret columns as the connected role may see them (task_secrets, ADR 0031):
    # a probe of task_pkey per task of the page.
    "Nested Loop",
    "Index Scan using task_name_c_idx on task t",
    "Index Scan using task_pkey on task",
    "Limit",
    "Result",
    "Index Scan Backward using occurrence_active_task_outcome_idx on occurrence_active o",
    # Each task's calendar names (revision 0036): a probe of task_calendar's key per task of
    # the page, joined to `calendar` (a row per calendar, read whole as `instance` is).
    "Sort",
    "Nested Loop",
    "Index Only Scan using task_calendar_pkey on task_calendar tc",
    "Seq Scan on calendar c",
]


@pytest.fixture
def million(database_url: str) -> str:
    query(database_url, "ALTER TABLE task SET (autovacuum_enabled = false)")
    query(database_url, "ALTER TABLE occurrence_active SET (autovacuum_enabled = false)")
    query(
        database_url,
        """
        INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload,
                          occurrence_seq)
        SELECT 'task-' || lpad(g::text, 7, '0'), 'interval', '1 hour', now(), 'shell',
               '{"command": "true"}', %(per_task)s
        FROM generate_series(1, %(n)s) g RETURNING 1""",
        {"n": TASKS, "per_task": PER_TASK},
    )
    query(
        database_url,
        """
        INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, status,
                                not_before, finished_at)
        SELECT t.id, s, now(), 'manual', 'allow', 'success', now(), now()
        FROM task t CROSS JOIN generate_series(1, %(per_task)s) s RETURNING 1""",
        {"per_task": PER_TASK},
    )
    # A tenth of the tasks exclude a calendar (revision 0036): each shown task's calendar names
    # are one probe of task_calendar's key.
    query(database_url, "INSERT INTO calendar (name, source_kind) VALUES ('c', 'dates')")
    query(
        database_url,
        "INSERT INTO task_calendar SELECT t.id, c.id FROM task t, calendar c WHERE t.id % 10 = 0",
    )
    query(database_url, "ANALYZE task_calendar")
    query(database_url, "ANALYZE calendar")
    query(database_url, "ANALYZE task")
    query(database_url, "ANALYZE occurrence")
    query(  # the tables and their indexes, as the planner sees them, 200 times larger (of the
        # partitioned occurrence, its default partition's, where these rows are: issue 47)
        database_url,
        """
        UPDATE pg_class c SET reltuples = c.reltuples * %(scale)s
        WHERE c.oid IN ('task'::regclass, 'occurrence_active'::regclass,
                        'task_calendar'::regclass)
           OR c.oid IN (SELECT indexrelid FROM pg_index
                        WHERE indrelid IN ('task'::regclass, 'occurrence_active'::regclass,
                                           'task_calendar'::regclass))
        RETURNING c.oid""",
        {"scale": SCALE},
    )
    return database_url


def _explain(url: str, params: dict, options: str = "") -> str:
    with psycopg.connect(url, prepare_threshold=None) as conn:  # as the Client sends it
        rows = conn.execute(f"EXPLAIN {options}{queries.QUERIES['task_list'].sql}", params)
        return "\n".join(r[0] for r in rows)


def _nodes(plan: str) -> list[str]:
    """The plan's node names and relations, without costs, conditions or filters."""
    found = []
    for line in plan.splitlines():
        node = re.sub(r"^\s*(->\s*)?", "", line)
        if line.lstrip().startswith("->") or line == line.lstrip():
            found.append(re.sub(r"\s*\(.*$", "", node))
    return found


@pytest.mark.parametrize("after", [None, "task-0002500"], ids=["first page", "later page"])
def test_a_tasks_list_page_at_a_million_tasks_reads_one_page_and_one_outcome_per_task(
    million, after
) -> None:
    """Fails on a `tasks list` whose newest outcome the index cannot serve (a scan of
    occurrence, a sort of a task's occurrences, a hash join of both tables), or that reads
    every task to sort them."""
    params = {**PAGE, "after": after}
    plan = _explain(million, params)
    assert _nodes(plan) == PLAN, plan
    seen = re.search(r"Index Scan using task_name_c_idx on task t .*?rows=(\d+)", plan)
    assert seen is not None, plan
    assert int(seen[1]) >= 400_000, plan  # the rows the planner expects: as at a million tasks
    ran = _explain(million, params, "(ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) ")
    assert re.search(r"task_name_c_idx on task t \(actual rows=101(?:\.00)? loops=1\)", ran), ran
    assert re.search(r"task_pkey on task \(actual rows=1(?:\.00)? loops=101\)", ran), ran
    outcome = r"occurrence_active_task_outcome_idx .*\(actual rows=1(?:\.00)? loops=101\)"
    assert re.search(outcome, ran), ran
