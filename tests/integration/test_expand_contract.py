"""Expand and contract on a real database: `migrate` stops before the contract step, `--contract`
refuses while an older build is registered, and a downgrade and upgrade keep the data."""

import psycopg
import pytest

from scheduler_daemon.storage import migration
from tests.conftest import row_counts
from tests.support import query

pytestmark = pytest.mark.smoke
OLD = migration.BASELINE  # the build before the first expand/contract pair


def _old_instance(url: str) -> None:
    query(
        url,
        "INSERT INTO instance (id, hostname, pid, version, schema_revision, concurrency, "
        "lease_ttl, lease_grace, reconcile_interval) VALUES ('old-1', 'h', 1, '0.1.0', %s, 1, "
        "'15s', '5s', '5s')",
        (OLD,),
    )


def test_migrate_applies_expand_steps_and_leaves_the_contract_pending(
    cli, empty_database_url
) -> None:
    migration.upgrade(empty_database_url, OLD)
    result = cli("migrate", url=empty_database_url)
    assert result.code == 0, result.err
    build = migration.build()
    # Up to the step before the first contract (this build's `needs` when its own expand steps
    # come before it; a later release's expand steps wait for --contract).
    reached = build.expand_target(OLD)
    assert migration.current_revision(empty_database_url) == reached
    assert build.after(reached)[0].phase == "contract"
    pending = [s.revision for s in build.after(reached) if s.phase == "contract"]
    assert f"contract step(s) {', '.join(pending)} pending" in result.out
    schema = cli("migrate", "--check", "--json", url=empty_database_url).json()
    assert schema["oldest_build"] == OLD  # the old build may still write
    assert schema["contract_pending"] == pending


def test_migrate_contract_refuses_while_an_old_instance_is_registered(
    cli, empty_database_url
) -> None:
    url = empty_database_url
    migration.upgrade(url, OLD)
    assert cli("migrate", url=url).code == 0
    _old_instance(url)
    record = query(url, "SELECT value FROM fleet_setting WHERE key = 'schema_compat'")
    with psycopg.connect(url, autocommit=True) as conn:
        before = row_counts(conn)
    result = cli("migrate", "--contract", url=url)
    assert result.code == 6
    assert result.err.count("\n") == 1
    assert "old-1 (version 0.1.0, schema 0003)" in result.err
    reached = migration.build().expand_target(OLD)
    assert migration.current_revision(url) == reached  # nothing applied
    assert query(url, "SELECT value FROM fleet_setting WHERE key = 'schema_compat'") == record
    with psycopg.connect(url, autocommit=True) as conn:
        assert row_counts(conn) == before
    query(url, "DELETE FROM instance")
    done = cli("migrate", "--contract", url=url)
    assert done.code == 0, done.err
    assert migration.current_revision(url) == migration.head_revision()


def test_upgrade_downgrade_upgrade_keeps_tasks_occurrences_and_runs(
    cli, empty_database_url
) -> None:
    url = empty_database_url
    migration.upgrade(url, OLD)
    # Rows as a build of OLD writes them (this build's CLI writes columns OLD lacks).
    query(
        url,
        "INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload, next_run_at) "
        "VALUES ('t', 'interval', '1 hour', now(), 'shell', '{\"command\": \"true\"}', now())",
    )
    query(
        url,
        "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, "
        "status, not_before) SELECT id, 1, now(), 'manual', 'forbid', 'queued', now() FROM task",
    )
    query(
        url,
        "INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at, "
        "takeover_at, status, finished_at) SELECT id, 1, 'old', 1, now(), now(), 'success', "
        "now() FROM occurrence",
    )

    def rows() -> dict[str, list[dict]]:
        added = {"build_revision", "history_retention", "source"}  # columns of later steps
        return {
            "task": [
                {k: v for k, v in r.items() if k not in added}
                for r in query(url, "SELECT * FROM task ORDER BY id")
            ],
            "occurrence": query(url, "SELECT * FROM occurrence ORDER BY id"),
            "run": [
                {k: v for k, v in r.items() if k not in added}
                for r in query(url, "SELECT * FROM run ORDER BY id")
            ],
        }

    first = rows()
    migration.upgrade(url)
    assert rows() == first
    migration.downgrade(url, OLD)
    assert rows() == first
    assert migration.current_revision(url) == OLD
    migration.upgrade(url)
    assert rows() == first
    assert migration.current_revision(url) == migration.head_revision()
