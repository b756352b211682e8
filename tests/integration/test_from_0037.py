"""The path from 0037 (issue 45, ADR 0027 point 5): a database built by the migration chain
before the squash, with rows in every table, reaches the baseline's schema with `migrate`, once
the fleet is stopped; the schema it ends with is the fresh baseline's (the "held equal" test);
`audit` is clean and a daemon runs its tasks, the queued and the interrupted one included.

The fixture, tests/fixtures/schema_0037.sql.gz, is a database migrated to 0037 by the old chain
(main at fb2bf31, PostgreSQL 15), gzipped so that `duplicates` does not pair it with the
baseline. To make it again, at a commit from before the squash (fb2bf31 or 61278d7):

    createdb old && python -c "from scheduler_daemon.storage import migration; \\
        migration.upgrade('postgresql://postgres@127.0.0.1:5432/old')"
    { pg_dump --schema-only --no-owner --no-privileges old
      pg_dump --data-only --inserts -t scheduler_daemon_alembic_version -t fleet_setting \\
        -t deadline_mark old; } \\
      | grep -v -e '^.\\(un\\)\\?restrict ' -e "set_config('search_path'" \\
      | gzip -9n > tests/fixtures/schema_0037.sql.gz

(newer pg_dump's `\\restrict` lines are psql commands, which psycopg cannot run; the empty
search path it sets would hide the tables from the settings trigger while the rows go in).
"""

import gzip
from pathlib import Path

import psycopg
import pytest

from scheduler_daemon.storage import migration
from scheduler_daemon.storage.database import make_pool
from scheduler_daemon.storage.shape import SHAPES
from tests.conftest import row_counts
from tests.schema_snapshot import dump
from tests.support import Replica, query, wait_for

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "schema_0037.sql.gz"
SNAPSHOT = Path(__file__).resolve().parents[2] / "sql" / "schema.sql"

TASKS = """
INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload, next_run_at,
    occurrence_seq, last_outcome_seq, last_occurrence_id, last_status, last_finished_at,
    last_error, last_scheduled_for, uuid, in_process, notify_url, notify_on)
VALUES ('recurring', 'interval', '1 hour', now() - interval '3 hours', 'shell',
        '{"command": "true"}', now() + interval '1 hour', 3, 1, NULL, 'failed', now(), 'boom',
        now() - interval '2 hours', NULL, NULL, 'http://127.0.0.1:9/hook', '{failure}');
INSERT INTO task (name, schedule_kind, run_at, anchor_at, executor, payload, status,
    occurrence_seq, last_outcome_seq, last_status, last_finished_at, last_scheduled_for)
VALUES ('once', 'once', now() - interval '1 hour', now() - interval '2 hours', 'shell',
        '{"command": "true"}', 'completed', 1, 1, 'success', now(), now() - interval '1 hour');
"""
OCCURRENCES = """
INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, status,
    not_before, attempts, lease_token, finished_at, idempotency_key)
SELECT t.id, o.seq, now() - o.ago, 'schedule', 'allow', o.status, now() - o.ago, o.attempts,
    o.attempts, CASE WHEN o.status IN ('queued', 'running') THEN NULL ELSE now() END, o.key
FROM task t, (VALUES (1, interval '2 hours', 'failed', 1, 'k1'),
                     (2, interval '1 hour', 'running', 1, NULL),
                     (3, interval '1 minute', 'queued', 0, 'k3'))
             AS o(seq, ago, status, attempts, key)
WHERE t.name = 'recurring'
UNION ALL
SELECT t.id, 1, t.run_at, 'schedule', 'forbid', 'success', t.run_at, 1, 1, now(), 'k-once'
FROM task t WHERE t.name = 'once';
UPDATE task SET last_occurrence_id = (SELECT min(id) FROM occurrence) WHERE name = 'recurring';
UPDATE task SET last_occurrence_id = (SELECT max(id) FROM occurrence) WHERE name = 'once';
INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at, takeover_at,
    started_at, status, finished_at, build_revision, exit_code)
SELECT id, 1, 'old-1', 1, now() - interval '1 hour', now() - interval '59 minutes',
    now() - interval '1 hour', CASE status WHEN 'running' THEN 'running' ELSE status END,
    CASE WHEN status = 'running' THEN NULL ELSE now() END, '0037',
    CASE status WHEN 'failed' THEN 1 WHEN 'success' THEN 0 END
FROM occurrence WHERE status <> 'queued';
"""
OTHER_ROWS = """
INSERT INTO instance (id, hostname, pid, version, schema_revision, concurrency, lease_ttl,
    lease_grace, reconcile_interval)
VALUES ('old-1', 'h', 1, '0.1.0', '0037', 4, '15s', '5s', '5s');
INSERT INTO notification_outbox (occurrence_id, task_id, event, payload, delivered_at)
SELECT id, task_id, 'failure', '{}', now() FROM occurrence WHERE status = 'failed';
INSERT INTO operator_action (actor, action, source, task_id, detail)
SELECT 'me', 'pause', 'cli', id, 'planted' FROM task WHERE name = 'recurring';
INSERT INTO calendar (name, source_kind, first_day, last_day)
VALUES ('holidays', 'dates', '2026-12-25', '2026-12-26');
INSERT INTO calendar_date (calendar_id, day) SELECT id, '2026-12-25' FROM calendar;
INSERT INTO task_calendar (task_id, calendar_id)
SELECT t.id, c.id FROM task t, calendar c WHERE t.name = 'recurring';
INSERT INTO task_pruned (task_id, pruned_through, updated_at)
SELECT id, now() - interval '1 day', now() FROM task WHERE name = 'once';
INSERT INTO fleet_epoch (system_identifier, timeline, first_seen_at)
VALUES (1, 1, now() - interval '1 day');
"""


def _restore(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(gzip.decompress(FIXTURE.read_bytes()).decode())  # type: ignore[arg-type]
    with psycopg.connect(url, autocommit=True) as conn:
        for block in (TASKS, OCCURRENCES, OTHER_ROWS):
            conn.execute(block)  # type: ignore[arg-type]


def test_a_database_at_0037_reaches_the_baseline_once_the_fleet_is_stopped_and_runs_its_tasks(
    cli, empty_database_url: str, database_url: str, executors
) -> None:
    url = empty_database_url
    _restore(url)
    assert migration.current_revision(url) == "0037"
    with psycopg.connect(url, autocommit=True) as conn:
        before = row_counts(conn)
    assert all(before.values()), before  # a row in every table

    refused = cli("migrate", url=url)
    assert refused.code == 6, refused.err
    assert refused.err.count("\n") == 1
    assert "instance(s) old-1 (version 0.1.0, schema 0037) are registered" in refused.err
    assert migration.current_revision(url) == "0037"
    with psycopg.connect(url, autocommit=True) as conn:
        assert row_counts(conn) == before  # nothing written

    query(url, "DELETE FROM instance")
    done = cli("migrate", url=url)
    assert done.code == 0, done.err
    assert "schema at 0038 (applied 0038)" in done.out
    assert migration.current_revision(url) == "0038"
    assert cli("migrate", "--check", url=url).code == 0
    assert cli("migrate", url=url).out.startswith("schema at 0038: nothing to apply")

    # Held equal: the path's schema is the fresh baseline's (the template database).
    assert dump(url) == dump(database_url)
    # ... and so is its shape, which the path recorded in its transaction (issue 47).
    shapes = [
        query(each, "SELECT value->>'shape' AS s FROM fleet_setting WHERE key = 'schema_compat'")
        for each in (url, database_url)
    ]
    assert shapes == [[{"s": SHAPES["0038"]}]] * 2
    with psycopg.connect(url) as conn:
        major = conn.info.server_version // 10000
    if major == 15:
        assert dump(url) == SNAPSHOT.read_text()

    # The contract's content: the stale outcome of a recurring task gone, a one-shot's kept.
    tasks = {
        r["name"]: r
        for r in query(
            url, "SELECT name, uuid, last_outcome_seq, last_status, last_error FROM task"
        )
    }
    assert tasks["recurring"]["uuid"] is not None
    assert (tasks["recurring"]["last_outcome_seq"], tasks["recurring"]["last_status"]) == (0, None)
    assert tasks["recurring"]["last_error"] is None
    assert (tasks["once"]["last_outcome_seq"], tasks["once"]["last_status"]) == (1, "success")
    names = {r["proname"] for r in query(url, "SELECT proname FROM pg_proc WHERE proname ~ '^sd_'")}
    assert names == {
        "sd_claim_launch_v6",
        "sd_succeed_runs_v4",
        "sd_show_outcomes_v1",
        "sd_occurrence_key_v1",
        "sd_end_pause_v1",
        "sd_masked_v1",  # the reader's masks (issue 46, ADR 0031)
        "sd_partitions_v1",  # the history's partition upkeep (issue 47, ADR 0033)
    }

    audit = cli("audit", "--json", url=url)
    assert audit.code == 0, audit.out

    pool = make_pool(url, max_size=4, name="from-0037")
    pool.open(wait=True)
    try:
        replica = Replica(url, pool, executors, "new-1")
        assert replica.services.reconciler.run_once().counts["taken_over"] == 1

        def all_ran() -> bool:
            replica.launcher.run_once()
            replica.finished()
            replica.completer.run_once()
            left = query(url, "SELECT count(*) AS n FROM occurrence WHERE finished_at IS NULL")
            return left[0]["n"] == 0

        wait_for(all_ran, timeout=60, message="the queued and the interrupted firings to run")
    finally:
        pool.close()
    finished = query(
        url,
        "SELECT o.occurrence_seq, o.status, o.idempotency_key FROM occurrence o "
        "JOIN task t ON t.id = o.task_id WHERE t.name = 'recurring' ORDER BY 1",
    )
    assert [(r["occurrence_seq"], r["status"]) for r in finished] == [
        (1, "failed"),
        (2, "success"),
        (3, "success"),
    ]
    assert cli("audit", "--json", url=url).code == 0


@pytest.mark.parametrize(
    ("column", "value"),
    [("attempts", 2147483647), ("interruptions", 2147483647), ("lease_token", 2**63 - 1)],
)
def test_the_path_from_0037_refuses_to_bound_a_row_past_the_claims_arithmetic(
    cli, empty_database_url: str, column: str, value: int
) -> None:
    """A row written before the bounds existed (issue 44: it stopped every claim) fails the
    path's VALIDATE, which names the bound; the database stays at 0037, whole."""
    url = empty_database_url
    _restore(url)
    query(url, "DELETE FROM instance")
    query(url, f"UPDATE occurrence SET {column} = %s WHERE status = 'queued'", (value,))
    with pytest.raises(psycopg.errors.CheckViolation, match="occurrence_"):
        migration.expand(url)
    assert migration.current_revision(url) == "0037"
    assert (
        query(url, "SELECT count(*) AS n FROM pg_proc WHERE proname = 'sd_claim_launch_v1'")[0]["n"]
        == 1
    )
