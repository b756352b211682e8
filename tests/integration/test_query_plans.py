"""EXPLAIN guards: over a seeded table the hot statements use their named indexes, and the claim
never locks more rows than its limit (odd-jobs#115: LIMIT … SKIP LOCKED re-executed by the
planner claimed more than asked)."""

import re
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from scheduler_daemon.storage import query as queries
from tests.support import nested_plans, query

SEEDED = 20_000
SECOND = timedelta(seconds=1)
BATCH = {"ids": [1, 2], "tokens": [1, 1], "owner": "o", "build_revision": "x", "now": None}
CLAIM = {"key": 1, "slots": 10, "owner": "o", "ttl": SECOND, "grace": SECOND}
CLAIM |= {"build_revision": "x", "known": ["0038"], "now": None}
KNOWN = {"known": ["0038"]}  # the chain of a build without the marked rows' revision (ADR 0029)
SUCCEED = {
    **BATCH,
    "occurrence_ids": [1, 2],
    "task_ids": [1, 2],
    "exit_codes": [0, 0],
    "http_statuses": [None] * 2,
    "output_tails": [None] * 2,
    "errors": [None] * 2,
    "channel": "c",
    "wake": False,
}


# An occurrence found by its id on the default partition (issue 47: no primary key).
BY_ID = r"Index Scan using occurrence_(id_key|active_id_idx) on occurrence_active o"


def _statement(name: str) -> str:
    """The last statement of a named query (the one its cardinality speaks of)."""
    return queries.QUERIES[name].sql.rsplit(";\n", 1)[-1]


@pytest.fixture
def seeded(database_url: str) -> str:
    _seed(database_url)
    return database_url


def _seed(database_url: str, *, analyze: bool = True) -> None:
    """Many tasks, mostly not due; many finished occurrences and runs, a few active ones."""
    query(
        database_url,
        """
        INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload, overlap,
                          next_run_at, occurrence_seq)
        SELECT 't' || g, 'interval', '1 hour', now(), 'shell', '{"command": "true"}', 'allow',
               now() + g * interval '1 second', 1000
        FROM generate_series(1, %(n)s) g RETURNING 1""",
        {"n": SEEDED},
    )
    query(
        database_url,
        """
        INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, status,
                                not_before, finished_at, attempts, lease_token)
        SELECT 1 + g %% %(n)s, g, now() - g * interval '1 second', 'manual', 'allow',
               CASE WHEN g %% 100 = 0 THEN 'queued' ELSE 'success' END, now(),
               CASE WHEN g %% 100 = 0 THEN NULL ELSE now() END, 1, 1
        FROM generate_series(1, 5 * %(n)s) g RETURNING 1""",
        {"n": SEEDED},
    )
    query(
        database_url,
        """
        INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at, takeover_at,
                         status, finished_at)
        SELECT id, 1, 'x', 1, now(), now(), 'success', now() FROM occurrence
        WHERE status = 'success' RETURNING 1""",
    )
    if analyze:
        query(database_url, "ANALYZE")


def _plan(url: str, name: str, params: dict[str, Any]) -> str:
    if re.search(r"\bsd_\w+_v\d+\(", _statement(name)):  # a function's statements (0012 on)
        return nested_plans(url, _statement(name), params, "SET enable_seqscan = off")
    with psycopg.connect(url) as conn:
        conn.execute("SET enable_seqscan = off")  # what matters is that an index can serve it
        rows = conn.execute(f"EXPLAIN {_statement(name)}", params).fetchall()
        conn.rollback()
    return "\n".join(r[0] for r in rows)


@pytest.mark.parametrize(
    ("name", "params", "indexes"),
    [
        ("task_claim_due", {"limit": 10, "now": None, **KNOWN}, ("task_due_idx",)),
        # The dispatch reads and moves its task by the primary key.
        (
            "occurrence_dispatch",
            {
                "task_id": 1,
                "scheduled_fors": ["2030-01-01T00:00:00Z"],
                "last_scheduled_fors": [None],
                "firing_counts": [1],
                "statuses": ["queued"],
                "reasons": [None],
                "spread_offsets": [None],
                "overlap": "allow",
                "concurrency_key": None,
                "next_run_at": None,
                "once_fired": False,
                "now": "2030-01-01T00:00:00Z",  # it runs (it calls sd_occurrence_key_v1)
                "finished": ["success"],
            },
            ("task_pkey",),
        ),
        (
            "task_next_due_wake",
            {"channel": "c", "wake": False, "limit": 10, "now": None, **KNOWN},
            ("task_due_idx",),
        ),
        ("occurrence_claim_launch", CLAIM, ("occurrence_queue_idx",)),
        (
            "run_takeover_candidates",
            {"after": 0, "limit": 10, "restart_quiet": timedelta(seconds=5), **KNOWN},
            "run_takeover_idx",
        ),
        # Either index holds only the executing rows (launching ones in the first).
        (
            "occurrence_expired_claims",
            {"after": 0, "limit": 10, **KNOWN},
            ("occurrence_claim_expiry_idx", "occurrence_executing_idx"),
        ),
        # A sequential scan of every occurrence ever kept, in every claim, before revision 0011.
        ("occurrence_executing_count", {}, ("occurrence_executing_idx",)),
        # A sequential scan of every task in every reconcile pass before revision 0010.
        (
            "task_unfinished_one_shots",
            {"after": 0, "limit": 10, **KNOWN},
            ("task_running_one_shot_idx",),
        ),
        # The batched hot path reaches each row of its batch through the primary key.
        (
            "occurrence_lock_many",
            {"ids": [1, 2]},
            ("occurrence_id_key", "occurrence_active_id_idx"),
        ),
        (
            "occurrence_finish_many",
            {**BATCH, "statuses": ["success"] * 2, "errors": [None] * 2, "reasons": [None] * 2},
            (
                "occurrence_id_key",
                "occurrence_active_id_idx",
                "occurrence_executing_idx",
            ),  # the running rows only
        ),
        (
            "run_finish_many",
            {
                **BATCH,
                "statuses": ["success"] * 2,
                "exit_codes": [0, 0],
                "http_statuses": [None] * 2,
                "output_tails": [None] * 2,
                "errors": [None] * 2,
            },
            ("run_id_key", "run_active_id_idx"),
        ),
        ("task_lock_many", {"ids": [1, 2]}, ("task_pkey",)),
        # Every reconcile pass: the tasks with a deadline only, never the whole task table
        # (revision 0030), and the few outbox rows without an occurrence.
        (
            "outbox_enqueue_deadlines",
            {
                "after": "2030-01-01T00:00:00Z",
                "until": "2030-01-01T01:00:00Z",
                "limit": 500,
                "operator": ["paused", "parked", "rescheduled", "deleted"],
            },
            ("task_deadline_idx",),
        ),
        # The deliverer's claim, with and without URLs full of POSTs in flight (issue 44): the
        # oldest due row by the due index, the task probed only for a candidate.
        (
            "outbox_claim",
            {"lease": timedelta(seconds=15), "full": []},
            ("notification_outbox_due_idx",),
        ),
        (
            "outbox_claim",
            {"lease": timedelta(seconds=15), "full": ["http://127.0.0.1:9/hook"]},
            ("notification_outbox_due_idx",),
        ),
        (
            "outbox_enqueue_unrecorded_deadlines",
            {"limit": 500},
            ("task_deadline_idx",),
        ),
        (
            "outbox_prune_unrecorded",
            {"retention": timedelta(days=1), "min_retention": timedelta(days=1), "limit": 500},
            ("notification_outbox_unrecorded_idx",),
        ),
        # A batch of successes: each run by its primary key or the index of running runs only.
        (
            "run_succeed_many",
            SUCCEED,
            ("run_id_key", "run_active_id_idx", "run_occurrence_running_key"),
        ),
        (
            "task_record_outcome_many",
            {
                "task_ids": [1, 2],
                "occurrence_ids": [1, 2],
                "seqs": [1, 2],
                "scheduled_fors": [None] * 2,
                "statuses": ["success"] * 2,
                "errors": [None] * 2,
                "lifecycles": ["completed"] * 2,
                "decides": [True] * 2,
                "now": None,
            },
            ("task_pkey",),
        ),
    ],
)
def test_hot_statements_use_their_named_index_on_a_seeded_table(seeded, name, params, indexes):
    # Each index is partial on the active rows, so the scan stays small however long the history.
    plan = _plan(seeded, name, params)
    assert any(index in plan for index in indexes), plan


def test_the_claim_locks_no_more_rows_than_its_limit_on_a_large_queue(seeded) -> None:
    with psycopg.connect(seeded) as conn:
        cursor = conn.execute(queries.QUERIES["occurrence_claim_launch"].sql, {**CLAIM, "slots": 3})
        assert [row[0] for row in cursor.fetchall()] == [3, 3, 3]  # free slots, per claimed row
        runs = conn.execute("SELECT count(*) FROM run WHERE owner = 'o'")
        assert runs.fetchone()[0] == 3


def test_a_claim_with_no_free_slot_claims_nothing_and_says_so(seeded) -> None:
    with psycopg.connect(seeded) as conn:
        conn.execute("UPDATE fleet_setting SET value = '0' WHERE key = 'max_concurrent_runs'")
        cursor = conn.execute(queries.QUERIES["occurrence_claim_launch"].sql, CLAIM)
        assert cursor.fetchall() == [(0, *[None] * 17)]  # one row: no slot, nothing claimed
        runs = conn.execute("SELECT count(*) FROM run WHERE owner = 'o'")
        assert runs.fetchone()[0] == 0


def _claim_plan(url: str, params: dict[str, Any]) -> str:
    """The plans of the claim's statements as sd_claim_launch_v6 makes them (its own planner
    settings), with the server's real costs."""
    return nested_plans(url, queries.QUERIES["occurrence_claim_launch"].sql, params)


def test_the_claim_walks_the_queue_index_when_the_statistics_are_stale(database_url) -> None:
    # The queue grew from empty since the last ANALYZE (a burst of triggers, a backfill): the
    # planner believes the table is small. Before the claim pinned its plan, every claim then
    # read all 20,000 queued rows through a BitmapAnd and sorted them (7 ms a claim, growing
    # with the queue); this asserts the ordered walk of the queue index with no Sort.
    query(
        database_url,
        """INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload, overlap)
           VALUES ('t', 'interval', '1 hour', now(), 'shell', '{"command": "true"}', 'allow')""",
    )
    query(database_url, "ANALYZE occurrence")  # statistics of an empty queue
    query(
        database_url,
        """INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, status,
                                   not_before)
           SELECT 1, g, now(), 'manual', 'allow', 'queued', now()
           FROM generate_series(1, 20000) g RETURNING 1""",
    )
    plan = _claim_plan(database_url, CLAIM)
    assert "Index Scan using occurrence_queue_idx" in plan, plan
    assert "Sort" not in plan.split("SubPlan")[0], plan
    assert "Bitmap" not in plan, plan
    # The budget's count reads only the executing rows; the launch finds each claimed row by id.
    assert "occurrence_executing_idx" in plan, plan
    assert re.search(BY_ID, plan), plan


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("occurrence_claim_launch", CLAIM),
        ("occurrence_claim_launch_after_successes", {**CLAIM, "claim_lock_timeout": "5s"}),
        ("run_succeed_many", SUCCEED),
    ],
)
def test_the_functions_plans_made_on_empty_tables_stay_on_the_indexes_as_the_tables_grow(
    database_url, name, params
) -> None:
    # The claim and the batched success are PL/pgSQL functions (migration 0012) that keep the
    # plans of their first call in a session. A daemon makes them on a new fleet's empty tables;
    # before the functions turned sequential scans off, the plan that locks a batch's runs was
    # a sequential scan then, and stayed one as the run table grew, until autovacuum analyzed
    # it (bench/run.py section a: the server's time per job went from 0.40 to 0.69 ms). This
    # plans on empty tables, grows them with autovacuum off (no ANALYZE replans), and asserts
    # the plans the second call uses read no table whole.
    for table in ("task", "occurrence_active", "run_active"):  # a partitioned table has none
        query(database_url, f"ALTER TABLE {table} SET (autovacuum_enabled = false)")

    def grow() -> None:  # the seeded tables, without their ANALYZE
        _seed(database_url, analyze=False)

    plans = nested_plans(database_url, queries.QUERIES[name].sql, params, between=grow)
    # Only the fleet's own tiny tables may be read whole: `instance` (a row per replica) and
    # `fleet_epoch` (a row per database epoch), which the claim reads since revision 0019.
    whole = [
        line
        for line in plans.splitlines()
        if "Seq Scan" in line and not re.search(r"Seq Scan on (instance|fleet_epoch)\b", line)
    ]
    assert not whole, plans


# A batch of ten successes of the young fleet's first runs (run i of occurrence i, token 1).
_BATCH_OF_TEN = {
    **SUCCEED,
    "ids": list(range(1, 11)),
    "tokens": [1] * 10,
    "occurrence_ids": list(range(1, 11)),
    "task_ids": [1],
    "exit_codes": [0] * 10,
    "http_statuses": [None] * 10,
    "output_tails": [None] * 10,
    "errors": [None] * 10,
    "owner": "o",
}


def _young_fleet(database_url: str) -> str:
    """One task with 3,000 running occurrences and no runs yet, autovacuum off (no ANALYZE
    replans behind the test's back); returns the statement that adds their runs, with a `{}`
    for the condition on the occurrence id."""
    for table in ("task", "occurrence_active", "run_active"):  # a partitioned table has none
        query(database_url, f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    query(
        database_url,
        """INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload, overlap,
                             occurrence_seq)
           VALUES ('t', 'interval', '1 hour', now(), 'shell', '{"command": "true"}', 'allow',
                   3000)""",
    )
    query(
        database_url,
        """INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap,
                                   status, not_before, attempts, lease_token, claim_owner)
           SELECT 1, g, now(), 'manual', 'allow', 'running', now(), 1, 1, 'o'
           FROM generate_series(1, 3000) g RETURNING 1""",
    )
    return """INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at,
                                   takeover_at, build_revision)
                  SELECT id, 1, 'o', 1, now(), now(), 'x' FROM occurrence
                  WHERE id {} RETURNING 1"""


def test_the_batched_success_looks_each_run_up_by_key_after_planning_on_a_young_fleet(
    database_url,
) -> None:
    # The function keeps the plans of its first call in a session, made here (as on a new
    # fleet) while the run table holds ten rows. sd_succeed_runs_v1 then joined the batch to
    # every running run, walking a partial index of them with no key (its entries are every run
    # since the last vacuum): with 1,000 runs running, a batch of 10 took 6.7-7.1 ms instead
    # of 1.1-1.6 (revision 0013). This grows the fleet to 1,000 running runs and 2,000 finished
    # ones without an ANALYZE, and asserts that every scan of `run` or `occurrence` in the
    # success's plans has a key to look up. It fails against v1 (the run scan has none).
    add_runs = _young_fleet(database_url)
    query(database_url, add_runs.format("<= 10"))

    def grow() -> None:
        query(database_url, add_runs.format("> 10"))
        query(
            database_url,
            "UPDATE run SET status = 'success', finished_at = now() WHERE id > 1000 RETURNING 1",
        )

    plans = nested_plans(database_url, _statement("run_succeed_many"), _BATCH_OF_TEN, between=grow)
    lines = plans.splitlines()
    scans = [
        i
        for i, line in enumerate(lines)
        if re.search(r"Scan .*on (run|occurrence)(_active)?\b", line)
    ]
    assert len(scans) >= 6, plans  # the three locks, the lookups, the two updates' rows
    for scan in scans:
        at = scan
        if "Bitmap Heap Scan" in lines[scan]:  # its key is on the bitmap index scan under it
            at = next(j for j in range(scan, len(lines)) if "Bitmap Index Scan" in lines[j])
        key = lines[at + 1]
        assert "Index Cond:" in key, f"{lines[scan].strip()} looks nothing up by key:\n{plans}"
        assert "status" not in key, f"{lines[scan].strip()} walks a status:\n{plans}"


def _joins_by_key(plans: str) -> None:
    """No statement of the plans joins a whole table: every join is a nested loop whose inner
    side looks its rows up by key (a hash or merge join reads its inner table whole)."""
    assert "Hash Join" not in plans, plans
    assert "Merge Join" not in plans, plans


def test_the_claim_launches_each_row_by_key_after_an_analyze_of_a_backlog(database_url) -> None:
    # A backlog (an outage's catch-up, a burst of triggers) that autovacuum analyzed: the
    # planner expects a tenth of the queued rows per claim and, before revision 0014, updated
    # the claimed rows through a hash join that read the whole occurrence table by its primary
    # key (seqscans are off in the function), in every claim until the next ANALYZE: with
    # 30,000 queued, 3 daemons ran 1,108 no-op jobs/s instead of 3,861 and the server spent
    # 0.87 ms a job instead of 0.16 (docs/performance.md). Fails against revision 0013.
    query(
        database_url,
        """INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload, overlap)
           VALUES ('t', 'interval', '1 hour', now(), 'shell', '{"command": "true"}', 'allow')""",
    )
    query(
        database_url,
        """INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, status,
                                   not_before)
           SELECT 1, g, now(), 'manual', 'allow', 'queued', now()
           FROM generate_series(1, 20000) g RETURNING 1""",
    )
    query(database_url, "ANALYZE")
    plans = _claim_plan(database_url, CLAIM)
    _joins_by_key(plans)
    assert re.search(BY_ID, plans), plans


def test_the_batched_success_finds_each_row_by_key_after_an_analyze_of_a_young_fleet(
    database_url,
) -> None:
    # Autovacuum analyzed the run table while it held a few rows (a new fleet, its first
    # minute): the success then joined its batch to the runs through a hash join over every
    # run's primary key, planned for 28 rows and kept while the table grew, until the next
    # ANALYZE (auto_explain in bench/run.py section a, 2026-12-06). This analyzes 30 runs,
    # plans, grows the fleet to 3,000 runs without an ANALYZE, and asserts the second call's
    # plans join nothing whole. Fails against revision 0013.
    add_runs = _young_fleet(database_url)
    query(database_url, add_runs.format("<= 30"))
    query(database_url, "ANALYZE")

    def grow() -> None:
        query(database_url, add_runs.format("> 30"))

    _joins_by_key(
        nested_plans(database_url, _statement("run_succeed_many"), _BATCH_OF_TEN, between=grow)
    )


MARKED = 2_000


def _mark_the_head_of_the_queue(url: str) -> None:
    """MARKED queued occurrences and due tasks marked `needs_build = '9001'` (ADR 0029), each
    ahead of every unmarked one in its scan's order: a scan that reads marked rows and filters
    them out would read all of them before the first row it may take."""
    query(
        url,
        """
        INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, status,
                                not_before, attempts, needs_build)
        SELECT 1, 1000000 + g, now() - interval '1 year', 'manual', 'allow', 'queued',
               now() - interval '1 year', 0, '9001'
        FROM generate_series(1, %(n)s) g RETURNING 1""",
        {"n": MARKED},
    )
    query(
        url,
        """
        INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload, overlap,
                          next_run_at, needs_build)
        SELECT 'marked' || g, 'interval', '1 hour', now(), 'shell', '{"command": "true"}',
               'allow', now() - interval '1 year', '9001'
        FROM generate_series(1, %(n)s) g RETURNING 1""",
        {"n": MARKED},
    )
    query(url, "UPDATE task SET next_run_at = now() - interval '1 day' WHERE id <= 20 RETURNING 1")
    query(url, "ANALYZE")


def _filtered(plan: str) -> int:
    """The most rows any node of `plan` read and filtered out."""
    return max((int(n) for n in re.findall(r"Rows Removed by Filter: (\d+)", plan)), default=0)


def test_a_build_without_the_marked_revision_never_reads_a_marked_row(seeded) -> None:
    """The plan guard of ADR 0029: the claim and the due scan of a build whose chain lacks
    9001 pass over the MARKED rows marked with it by index, never reading them: the hot indexes
    (occurrence_queue_idx, task_due_idx) hold only unmarked rows and the marked lane is found by
    revision. Without the mechanism (the hot indexes as they were, holding marked rows, the scan
    filtering them) each claim and due scan reads and drops all MARKED rows first: this fails."""
    _mark_the_head_of_the_queue(seeded)
    analyze = "SET auto_explain.log_analyze = on"
    claim = nested_plans(seeded, queries.QUERIES["occurrence_claim_launch"].sql, CLAIM, analyze)
    assert "Index Scan using occurrence_queue_idx" in claim, claim
    assert "Index Scan using occurrence_queue_marked_idx" in claim, claim
    assert _filtered(claim) < MARKED, claim
    with psycopg.connect(seeded) as conn:
        due = "\n".join(
            row[0]
            for row in conn.execute(
                f"EXPLAIN (ANALYZE) {_statement('task_claim_due')}",
                {"limit": 10, "now": None, **KNOWN},
            )
        )
        conn.rollback()
    assert "Index Scan using task_due_idx" in due, due
    assert "task_due_marked_idx" in due, due
    assert _filtered(due) < MARKED, due
    # The claim took unmarked rows only, its free slots full.
    with psycopg.connect(seeded) as conn:
        rows = conn.execute(queries.QUERIES["occurrence_claim_launch"].sql, CLAIM).fetchall()
        claimed = [row[1] for row in rows]
        marks = conn.execute(
            "SELECT count(*) FROM occurrence WHERE id = ANY(%s) AND needs_build IS NOT NULL",
            (claimed,),
        ).fetchone()
        conn.rollback()
    assert len(claimed) == CLAIM["slots"]
    assert marks == (0,)


RENEW = {
    "ids": [1, 2],
    "occurrence_ids": [1, 2],
    "tokens": [1, 1],
    "owner": "o",
    "ttl": SECOND,
    "grace": SECOND,
    "follow_window": SECOND,
}
FINISH_MANY = {
    "ids": [1, 2],
    "tokens": [1, 1],
    "statuses": ["failed"] * 2,
    "errors": [None] * 2,
    "reasons": [None] * 2,
    "now": None,
}
RUN_FINISH_MANY = {
    **BATCH,
    "statuses": ["failed"] * 2,
    "exit_codes": [1, 1],
    "http_statuses": [None] * 2,
    "output_tails": [None] * 2,
    "errors": [None] * 2,
}


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("occurrence_claim_launch", CLAIM),
        ("run_succeed_many", SUCCEED),
        ("run_renew", RENEW),
        ("occurrence_finish_many", FINISH_MANY),
        ("run_finish_many", RUN_FINISH_MANY),
        ("run_takeover_candidates", {"after": 0, "limit": 10, "restart_quiet": SECOND, **KNOWN}),
        ("occurrence_executing_count", {}),
    ],
)
def test_the_hot_statements_touch_only_the_default_partitions(database_url, name, params) -> None:
    # Issue 47: with many dated partitions, a hot statement that is not pruned to the default
    # partition (`finished_at IS NULL`) probes every partition's indexes. Fails if one of the
    # claim, the completions or the renewal reads or writes `occurrence`/`run` without it.
    with psycopg.connect(database_url, autocommit=True) as conn:
        for table in ("occurrence", "run"):
            for day in range(1, 4):
                conn.execute(
                    f"CREATE TABLE {table}_p2026010{day}0000 PARTITION OF {table} "  # type: ignore[arg-type]
                    f"FOR VALUES FROM ('2026-01-0{day} UTC') TO ('2026-01-0{day + 1} UTC')"
                )
    plan = _plan(database_url, name, params)
    assert "_p2026" not in plan, plan
    assert "_active" in plan, plan
