"""Run history (storage/history.py, `runs list`) against a real database: which rows a history
shows for each state an occurrence can be in, and how it pages."""

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from scheduler_daemon.domain.status import RunStatus
from scheduler_daemon.storage import query as queries
from tests.support import Replica, make_reconciler, query, shell_task


def test_an_occurrence_requeued_after_a_failed_run_is_listed_as_queued(
    client, pool, executors, database_url
) -> None:
    # Before the fix the history had one row per run plus one per occurrence *that never ran*,
    # so an occurrence waiting for its retry showed only its failed run, and `--status queued`
    # missed it.
    task = shell_task(client, command="exit 3", max_attempts=2, backoff=timedelta(minutes=5))
    occurrence = client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    replica.launcher.run_once()
    (run,) = replica.finished()
    assert replica.completer.complete(run) == "retry"
    queued = client.list_runs(status="queued")
    assert [(r.occurrence_id, r.id, r.status) for r in queued] == [(occurrence.id, None, "queued")]
    # The whole history: the waiting attempt above its failed run, each shown once.
    rows = client.list_runs(task=task.id)
    assert [(r.id, r.status) for r in rows] == [(None, "queued"), (run.run_id, "failed")]


def test_an_occurrence_requeued_by_a_takeover_is_listed_as_queued(
    client, pool, executors, database_url
) -> None:
    task = shell_task(client, command="sleep 30")
    occurrence = client.trigger(task.id, requested_by="test")
    owner = Replica(database_url, pool, executors, "owner")
    owner.launcher.run_once()
    (held,) = list(owner.held)
    query(
        database_url,
        "UPDATE run SET lease_expires_at = now() - interval '10 seconds', "
        "takeover_at = now() - interval '5 seconds' WHERE status = 'running' RETURNING id",
    )
    assert make_reconciler(pool).run_once().ids["taken_over"] == [held.run_id]
    held.job.stop("test")
    queued = client.list_runs(status="queued")
    assert [(r.occurrence_id, r.id) for r in queued] == [(occurrence.id, None)]
    assert [r.status for r in client.list_runs(task=task.id)] == ["queued", "interrupted"]


def test_a_finished_occurrence_shows_only_its_runs_and_a_running_one_only_its_run(
    client, pool, executors, database_url
) -> None:
    task = shell_task(client, command="exit 0", overlap="allow")
    client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    replica.launcher.run_once()
    (run,) = replica.finished()
    assert [(r.id, r.status) for r in client.list_runs(task=task.id)] == [(run.run_id, "running")]
    assert replica.completer.complete(run) == "recorded"
    assert [(r.id, r.status) for r in client.list_runs(task=task.id)] == [(run.run_id, "success")]


# -- paging over a planted history ---------------------------------------------------------------
OCCURRENCES = 5_000


def _hourly_tasks(url: str, *names: str) -> None:
    """Hourly shell tasks `names`, ids 1, 2, … in that order, planted by SQL."""
    query(
        url,
        """
        INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload, overlap)
        SELECT n, 'interval', '1 hour', now(), 'shell', '{"command": "true"}', 'allow'
        FROM unnest(%s::text[]) WITH ORDINALITY AS t (n, i) ORDER BY i RETURNING 1""",
        (list(names),),
    )


@pytest.fixture
def planted(database_url: str) -> str:
    """Two tasks, 5,000 occurrences and about as many runs, made by bulk SQL: mostly one
    successful run; every 10th a failed run then a successful one; every 7th queued again after
    a failed run; every 13th skipped without a run."""
    _hourly_tasks(database_url, "a", "b")
    query(
        database_url,
        """
        INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, status,
                                reason, not_before, finished_at, attempts, lease_token)
        SELECT 1 + g %% 2, g, now() - (%(n)s - g) * interval '1 second', 'schedule', 'allow',
               CASE WHEN g %% 13 = 0 THEN 'skipped' WHEN g %% 7 = 0 THEN 'queued'
                    ELSE 'success' END,
               CASE WHEN g %% 13 = 0 THEN 'overlap' END, now(),
               CASE WHEN g %% 13 = 0 OR g %% 7 <> 0 THEN now() END, 1, 2
        FROM generate_series(1, %(n)s) g RETURNING 1""",
        {"n": OCCURRENCES},
    )
    query(
        database_url,
        """
        INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at,
                         takeover_at, status, started_at, finished_at)
        SELECT o.id, a, 'x', a, now(), now(),
               CASE WHEN a = 1 AND (o.status = 'queued' OR o.id % 10 = 0) THEN 'failed'
                    ELSE 'success' END,
               o.scheduled_for + a * interval '1 ms', o.scheduled_for + a * interval '2 ms'
        FROM occurrence o CROSS JOIN generate_series(1, 2) a
        WHERE o.status <> 'skipped' AND (a = 1 OR (o.id % 10 = 0 AND o.status = 'success'))
        ORDER BY o.id, a RETURNING 1""",
    )
    query(database_url, "ANALYZE")
    return database_url


def _expected(url: str, *, status: str | None = None, task_id: int | None = None) -> list[Any]:
    """The whole history as (occurrence_id, run id), worked out in Python from the tables."""
    occurrences = query(url, "SELECT id, task_id, status FROM occurrence ORDER BY id DESC")
    runs: dict[int, list[dict[str, Any]]] = {}
    for run in query(url, "SELECT id, occurrence_id, status FROM run ORDER BY id DESC"):
        runs.setdefault(run["occurrence_id"], []).append(run)
    rows = []
    for occ in occurrences:
        if task_id is not None and occ["task_id"] != task_id:
            continue
        own = runs.get(occ["id"], [])
        if not own or own[0]["status"] != occ["status"]:
            rows.append((occ["id"], None, occ["status"]))
        rows += [(occ["id"], r["id"], r["status"]) for r in own]
    return [(o, r) for o, r, s in rows if status is None or s == status]


def _all_pages(client: Any, limit: int, **kw: Any) -> list[list[Any]]:
    pages, after = [], None
    while True:
        page = client.runs_page(limit=limit, after=after, **kw)
        pages.append([(r.occurrence_id, r.id) for r in page.rows])
        if page.after is None:
            return pages
        after = page.after


@pytest.mark.parametrize(
    ("limit", "filters"),
    [
        (100, {}),
        (333, {}),
        (100, {"status": "failed"}),
        (50, {"status": "queued"}),
        (100, {"status": "skipped"}),
        (250, {"task": "b"}),
        (70, {"task": "a", "status": "success"}),
    ],
)
def test_pages_of_the_history_join_up_to_all_of_it_newest_first_each_row_once(
    planted, client, limit, filters
) -> None:
    task_id = {"a": 1, "b": 2}.get(filters.get("task", ""))
    expected = _expected(planted, status=filters.get("status"), task_id=task_id)
    assert len(expected) > 2 * limit  # several pages
    pages = _all_pages(client, limit, **filters)
    assert all(len(p) == limit for p in pages[:-1])
    assert 1 <= len(pages[-1]) <= limit
    joined = [row for p in pages for row in p]
    assert joined == expected  # the order, and no row missed or shown twice
    assert len(set(joined)) == len(joined)
    assert (
        client.runs_page(limit=None, **filters).rows
        == client.runs_page(limit=len(expected), **filters).rows
    )


def test_a_cursor_after_an_occurrence_row_continues_with_that_occurrences_runs(
    planted, client
) -> None:
    history = _expected(planted)
    requeued = max(o for o, r in _expected(planted, status="queued"))
    before = history[history.index((requeued, None)) - 1]  # the last run of the next occurrence
    page = client.runs_page(limit=1, after=f"{before[0]}:{before[1]}")
    assert [(r.occurrence_id, r.id) for r in page.rows] == [(requeued, None)]
    assert page.after == str(requeued)
    (failed,) = client.runs_page(limit=1, after=page.after).rows
    assert (failed.occurrence_id, failed.status) == (requeued, "failed")


@pytest.mark.parametrize("cursor", ["x", "12:", ":3", "1:2:3", "-4", "1.5"])
def test_a_malformed_cursor_is_refused_in_one_line(cli, cursor) -> None:
    result = cli("runs", "list", "--after", cursor)
    assert result.code == 2
    assert result.err.startswith(f"error: --after '{cursor}' is not a cursor")
    assert result.err.count("\n") == 1


def _plan(url: str, name: str, params: dict[str, Any]) -> str:
    with psycopg.connect(url, prepare_threshold=None) as conn:
        rows = conn.execute(f"EXPLAIN {queries.QUERIES[name].sql}", params).fetchall()
    return "\n".join(r[0] for r in rows)


# The console's first history page: no filter, no cursor (bench/paging_first_page.py's too).
HISTORY = dict.fromkeys(("task_id", "status", "after_occurrence", "after_run")) | {
    "limit": 101,
    "run_statuses": list(RunStatus),
}


@pytest.mark.parametrize(
    ("params", "uses"),
    [
        ({}, ["run_active_occurrence_idx", "occurrence_own_row_idx"]),
        ({"after_occurrence": 2500, "after_run": 2400}, ["run_active_occurrence_idx"]),
        ({"status": "failed"}, ["run_active_status_history_idx"]),
        ({"status": "queued"}, ["occurrence_own_row_idx"]),
    ],
)
def test_a_history_page_walks_its_indexes_and_neither_table_is_read_whole(
    planted, params, uses
) -> None:
    # Would catch the old statement: a UNION over every run and every occurrence, sorted whole
    # before its LIMIT (a Seq Scan on both tables and a Sort above them).
    plan = _plan(planted, "run_history", {**HISTORY, **params})
    for index in uses:
        assert f"Index Scan Backward using {index}" in plan, plan
    assert "Seq Scan on run" not in plan, plan
    assert "Seq Scan on occurrence" not in plan, plan
    # The only sorts are of the two bounded pages (CTE scans), or of nothing (a branch that a
    # status rules out is a One-Time Filter: false): no sort reads a table. (Counted by node,
    # not by "Sort Key" lines: PostgreSQL 18 merges the two pages with an Incremental Sort.)
    sorted_tables = _tables_under_sorts(_json_plan(planted, {**HISTORY, **params}))
    assert sorted_tables == [], plan


def test_the_occurrence_branch_reads_no_further_than_the_run_page_reached(planted) -> None:
    # A full run page bounds the occurrence branch (`id >= low`): without it the branch would
    # walk back through every occurrence to find a page of its own rows.
    with psycopg.connect(planted, prepare_threshold=None) as conn:
        rows = conn.execute(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {queries.QUERIES['run_history'].sql}", HISTORY
        ).fetchone()
    scanned = _rows_of(rows[0][0]["Plan"], "occurrence_own_row_idx")
    assert 0 < scanned <= 101


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"after_occurrence": 2500},
        {"after_occurrence": 2500, "after_run": 2400},
        {"status": "failed", "after_occurrence": 2500},
        {"task_id": 2, "after_occurrence": 2500},
    ],
)
def test_a_page_deep_in_the_history_reads_about_a_page_of_rows(planted, params) -> None:
    # Would catch a keyset bound on one side of the run-occurrence join only: the walk down the
    # other index then starts at the newest row and reads everything above the cursor (it did:
    # 300,000 occurrence rows for a page in the middle of a week).
    with psycopg.connect(planted, prepare_threshold=None) as conn:
        (plan,) = conn.execute(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {queries.QUERIES['run_history'].sql}",
            {**HISTORY, **params},
        ).fetchone()
    read = _table_rows(plan[0]["Plan"])
    limit = HISTORY["limit"]
    # task_id 2 is every other occurrence, so its page spans twice as many rows.
    assert read["occurrence"] <= 5 * limit, read
    assert read["run"] <= 5 * limit, read
    assert 0 < read["args"] <= 2 * limit, read  # a probe per row of either side's page at most


def _table_rows(node: dict[str, Any]) -> dict[str, int]:
    """Rows each scan of occurrence and run returned, over all its loops; the probes of
    occurrence's id a subplan makes for a row's trigger arguments as the connected role may
    see them (`occurrence_args_shown`, ADR 0031) apart, as `args`."""
    found = {"occurrence": 0, "run": 0, "args": 0}
    rows = node.get("Actual Rows", 0) * node.get("Actual Loops", 0)
    # The scans are of the tables' partitions (issue 47): the default one in these tests.
    relation = {"occurrence_active": "occurrence", "run_active": "run"}.get(
        node.get("Relation Name", ""), node.get("Relation Name")
    )
    if node.get("Parent Relationship") == "SubPlan" and node.get("Index Name") in (
        "occurrence_id_key",
        "occurrence_active_id_idx",
    ):
        found["args"] += rows
    elif relation in found:
        found[relation] += rows
    for child in node.get("Plans", []):
        for table, rows in _table_rows(child).items():
            found[table] += rows
    return found


def _json_plan(url: str, params: dict[str, Any]) -> dict[str, Any]:
    with psycopg.connect(url, prepare_threshold=None) as conn:
        sql = f"EXPLAIN (FORMAT JSON) {queries.QUERIES['run_history'].sql}"
        (row,) = conn.execute(sql, params).fetchall()
    plan: dict[str, Any] = row[0][0]["Plan"]
    return plan


def _tables_under_sorts(node: dict[str, Any], sorting: bool = False) -> list[str]:
    """The tables a Sort or Incremental Sort node reads below it (a CTE scan reads none)."""
    sorting = sorting or node["Node Type"] in ("Sort", "Incremental Sort")
    own = [node["Relation Name"]] if sorting and "Relation Name" in node else []
    below = (_tables_under_sorts(child, sorting) for child in node.get("Plans", []))
    return own + [table for tables in below for table in tables]


def _rows_of(node: dict[str, Any], index: str) -> int:
    own = node.get("Actual Rows", 0) if node.get("Index Name") == index else 0
    return own + sum(_rows_of(child, index) for child in node.get("Plans", []))


@pytest.fixture
def old_task(database_url: str) -> str:
    """Task 1 (`old`) with the oldest 3,000 occurrences, one run each, then task 2 (`new`) with
    30,000 newer ones: a per-second task's history under a fleet's newer firings (9% of the
    rows, as bench/console_pages.py's per-second task)."""
    _hourly_tasks(database_url, "old", "new")
    query(
        database_url,
        """
        INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, status,
                                not_before, finished_at, attempts, lease_token)
        SELECT CASE WHEN g <= 3000 THEN 1 ELSE 2 END, g, now() - (40000 - g) * interval '1 s',
               'schedule', 'allow', 'success', now(), now(), 1, 1
        FROM generate_series(1, 33000) g RETURNING 1""",
    )
    query(
        database_url,
        """
        INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at,
                         takeover_at, status, started_at, finished_at)
        SELECT o.id, 1, 'x', 1, now(), now(), 'success', o.scheduled_for, o.scheduled_for
        FROM occurrence o ORDER BY o.id RETURNING 1""",
    )
    query(database_url, "ANALYZE")
    return database_url


@pytest.mark.parametrize("params", [{}, {"after_occurrence": 2000}, {"after_occurrence": 1}])
def test_a_task_whose_history_is_the_oldest_reads_about_a_page(old_task, client, params) -> None:
    # Fails on the statement before it gave one task its own branch: run_history walked
    # run_occurrence_idx and occurrence_pkey backwards over every newer occurrence of the other
    # task (30,000 rows of each) before it reached this task's (the console's task page of a
    # per-second task: 956 ms at 1,000,000 runs).
    with psycopg.connect(old_task, prepare_threshold=None) as conn:
        (plan,) = conn.execute(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {queries.QUERIES['run_history'].sql}",
            {**HISTORY, "task_id": 1, **params},
        ).fetchone()
    read = _table_rows(plan[0]["Plan"])
    limit = HISTORY["limit"]
    assert read["occurrence"] <= 3 * limit, read
    assert read["run"] <= 3 * limit, read
    # and the page is that task's newest, in order
    after = None if not params else str(params["after_occurrence"])
    page = client.runs_page(task="old", limit=limit, after=after)
    # after an occurrence's own row come its runs (the cursor without a run id)
    newest = 3000 if not params else params["after_occurrence"]
    expected = list(range(newest, max(newest - limit, 0), -1))
    assert [r.occurrence_id for r in page.rows] == expected
    assert [r.id for r in page.rows] == expected  # one run per occurrence, ids alike
