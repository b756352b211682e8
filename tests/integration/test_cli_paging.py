"""`tasks list` and `runs list` a page at a time, over rows planted by bulk SQL: page
boundaries, order, the cursor, the filters, the hint on a terminal and the index each page uses."""

from typing import Any

import psycopg
import pytest

from scheduler_daemon.storage import query as queries
from tests.support import query

TASKS = 5_000


@pytest.fixture
def tasks(database_url: str) -> str:
    """5,000 tasks named t00000..t04999 (every 7th paused, every 11th a one-shot that
    completed, a few deleted ones whose names are taken again), plus names that sort differently
    by byte than by a language's collation."""
    query(
        database_url,
        """
        INSERT INTO task (name, schedule_kind, every, run_at, anchor_at, executor, payload,
                          paused, status, deleted_at)
        SELECT 't' || lpad(g::text, 5, '0'),
               CASE WHEN g %% 11 = 0 THEN 'once' ELSE 'interval' END,
               CASE WHEN g %% 11 = 0 THEN NULL ELSE interval '1 hour' END,
               CASE WHEN g %% 11 = 0 THEN now() END, now(), 'shell', '{"command": "true"}',
               g %% 7 = 0, CASE WHEN g %% 11 = 0 THEN 'completed' ELSE 'enabled' END, NULL
        FROM generate_series(0, %(n)s - 1) g RETURNING 1""",
        {"n": TASKS},
    )
    query(
        database_url,
        """
        INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload, deleted_at)
        SELECT n, 'interval', '1 hour', now(), 'shell', '{"command": "true"}', now()
        FROM unnest(ARRAY['t00001', 'gone']) n RETURNING 1""",
    )
    query(
        database_url,
        """
        INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload)
        SELECT n, 'interval', '1 hour', now(), 'shell', '{"command": "true"}'
        FROM unnest(ARRAY['T-upper', 't_x', 'tab%', 'a']) n RETURNING 1""",
    )
    query(  # a history: a recurring task's newest outcome is read from its occurrences
        database_url,
        """
        INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, status,
                                not_before, finished_at)
        SELECT t.id, s, now(), 'manual', 'allow', 'success', now(), now()
        FROM task t CROSS JOIN generate_series(1, 3) s RETURNING 1""",
    )
    query(database_url, "ANALYZE")
    return database_url


def _names(url: str, where: str = "true") -> list[str]:
    rows = query(url, f"SELECT name FROM task WHERE deleted_at IS NULL AND {where}")
    return sorted((r["name"] for r in rows), key=lambda n: n.encode())


def _pages(cli: Any, *args: str) -> list[list[str]]:
    pages, after = [], None
    while True:
        extra = ("--after", after) if after is not None else ()
        page = [t["name"] for t in cli("tasks", "list", *args, *extra, "--json").json()]
        pages.append(page)
        if not page:
            return pages
        after = page[-1]


@pytest.mark.parametrize(
    ("args", "where"),
    [
        ((), "true"),
        (("--limit", "700"), "true"),
        (("--paused",), "paused"),
        (("--not-paused", "--limit", "1000"), "NOT paused"),
        (("--status", "completed"), "status = 'completed'"),
        (("--prefix", "t012"), "name LIKE 't012%'"),
        (
            ("--prefix", "t0", "--paused", "--status", "enabled"),
            "name LIKE 't0%' AND paused AND status = 'enabled'",
        ),
    ],
)
def test_task_pages_join_up_to_every_live_task_by_name_each_once(tasks, cli, args, where) -> None:
    expected = _names(tasks, where)
    pages = _pages(cli, *args)
    limit = int(args[args.index("--limit") + 1]) if "--limit" in args else 100
    assert all(len(p) == limit for p in pages[:-2])
    assert pages[-1] == []
    joined = [n for p in pages for n in p]
    assert joined == expected
    assert len(set(joined)) == len(joined)
    everything = cli("tasks", "list", *args, "--all", "--json").json()
    assert [t["name"] for t in everything] == expected


def test_a_prefix_is_literal_and_names_sort_by_byte(tasks, cli) -> None:
    assert [t["name"] for t in cli("tasks", "list", "--prefix", "t_", "--json").json()] == ["t_x"]
    assert [t["name"] for t in cli("tasks", "list", "--prefix", "tab%", "--json").json()] == [
        "tab%"
    ]
    first = [t["name"] for t in cli("tasks", "list", "--limit", "3", "--json").json()]
    assert first == ["T-upper", "a", "t00000"]


def test_the_first_page_has_a_hint_on_a_terminal_and_the_last_page_none(
    tasks, cli, monkeypatch
) -> None:
    from scheduler_daemon.cli import base

    plain = cli("tasks", "list")
    assert plain.err == ""  # not a terminal: nothing on stderr
    assert len(plain.out.splitlines()) == 101  # header + the default page of 100
    monkeypatch.setattr(base, "stderr_is_terminal", lambda: True)
    shown = cli("tasks", "list", "--limit", "2")
    assert shown.err == "more rows: --after a (or --all)\n"  # its last row: T-upper, a
    last = cli("tasks", "list", "--prefix", "t04999")
    assert last.err == ""
    json_page = cli("tasks", "list", "--limit", "1", "--json")
    assert json_page.err == "more rows: --after T-upper (or --all)\n"
    assert isinstance(json_page.json(), list)


def test_runs_list_hints_with_the_cursor_of_its_last_row(cli, monkeypatch) -> None:
    from scheduler_daemon.cli import base

    cli("tasks", "add", "r", "--every", "1h", "--command", "true", "--overlap", "allow")
    occurrences = [cli("tasks", "trigger", "r", "--json").json()["id"] for _ in range(3)]
    monkeypatch.setattr(base, "stderr_is_terminal", lambda: True)
    page = cli("runs", "list", "--limit", "2", "--json")
    assert [r["occurrence_id"] for r in page.json()] == occurrences[:0:-1]
    assert page.err == f"more rows: --after {occurrences[1]} (or --all)\n"
    rest = cli("runs", "list", "--after", str(occurrences[1]), "--json")
    assert [r["occurrence_id"] for r in rest.json()] == [occurrences[0]]
    assert rest.err == ""
    assert len(cli("runs", "list", "--all", "--json").json()) == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("tasks", "list", "--limit", "0"), "Invalid value for '--limit'"),
        (("runs", "list", "--limit", "0"), "Invalid value for '--limit'"),
        (("tasks", "list", "--status", "weird"), "Invalid value for '--status'"),
    ],
)
def test_bad_paging_arguments_are_refused_in_one_line(cli, args, message) -> None:
    result = cli(*args)
    assert result.code == 2
    assert message in result.err
    assert result.err.count("\n") == 1


TASK_PAGE = {"after": None, "pattern": None, "status": None, "paused": None, "limit": 101}


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"after": "t02500"},
        {"pattern": "t012%"},
        {"pattern": "t0%", "after": "t0400", "paused": True},
    ],
)
def test_a_task_page_walks_the_name_index_in_byte_order(tasks, params) -> None:
    # Would catch ordering by the database's collation (task_name_key cannot serve
    # `name COLLATE "C"`) or a prefix test the index cannot bound: a Seq Scan and a Sort; or a
    # newest outcome the outcome index cannot serve (revision 0021).
    with psycopg.connect(tasks, prepare_threshold=None) as conn:
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                f"EXPLAIN {queries.QUERIES['task_list'].sql}", {**TASK_PAGE, **params}
            )
        )
    assert "Index Scan using task_name_c_idx" in plan, plan
    assert "Index Scan Backward using occurrence_active_task_outcome_idx" in plan, plan
    # Each task's calendar names (revision 0036) are a subplan of their own, over the calendar
    # tables alone (empty here: test_task_list_plan holds it to task_calendar's key at scale).
    page, _, calendars = plan.partition("SubPlan")
    assert "Sort" not in page, plan
    assert "Seq Scan" not in page, plan
    assert "task_calendar" in calendars, plan
    assert "occurrence" not in calendars, plan
    if params.get("pattern"):
        assert "Index Cond" in plan
        assert ">=" in plan, plan  # the prefix became an index range
