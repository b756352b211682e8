"""Expand and contract on a real database: `migrate` applies what this build needs (an earlier
release's contract step included, under the instance check) and leaves trailing contract steps,
`--contract` refuses while an older build is registered, and a downgrade and upgrade keep the
data."""

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


def _first_contract() -> str:
    return next(s.revision for s in migration.build().after(OLD) if s.phase == "contract")


def _before(revision: str) -> str:
    steps = migration.build().steps
    return steps[[s.revision for s in steps].index(revision) - 1].revision


def test_migrate_applies_the_expand_steps_before_a_contract_step_and_leaves_trailing_ones(
    cli, empty_database_url
) -> None:
    # The schema of an unfinished earlier upgrade: its expand steps in, its contract pending.
    contract = _first_contract()
    url = empty_database_url
    migration.upgrade(url, _before(contract))
    result = cli("migrate", url=url)
    assert result.code == 0, result.err
    build = migration.build()
    assert migration.current_revision(url) == build.needs
    trailing = [s.revision for s in build.after(build.needs)]
    assert all(s.phase == "contract" for s in build.after(build.needs))
    if trailing:
        assert f"contract step(s) {', '.join(trailing)} pending" in result.out
    schema = cli("migrate", "--check", "--json", url=url).json()
    assert schema["contract_pending"] == trailing
    assert schema["oldest_build"] == build.oldest_build_at(build.needs)


def test_migrate_refuses_an_earlier_contract_step_this_build_needs_while_an_old_instance_runs(
    cli, empty_database_url
) -> None:
    # Would fail against the first expand-only `migrate`, which stopped before the earlier
    # release's contract step and left this build refusing its schema as behind; and against a
    # `migrate` that ran that contract step without the instance check.
    contract = _first_contract()
    url = empty_database_url
    migration.upgrade(url, _before(contract))
    _old_instance(url)
    record = query(url, "SELECT value FROM fleet_setting WHERE key = 'schema_compat'")
    with psycopg.connect(url, autocommit=True) as conn:
        before = row_counts(conn)
    for args in (("migrate",), ("migrate", "--contract")):
        result = cli(*args, url=url)
        assert result.code == 6, (args, result.out, result.err)
        assert result.err.count("\n") == 1
        assert f"old-1 (version 0.1.0, schema {OLD})" in result.err
        assert migration.current_revision(url) == _before(contract)  # nothing applied
        assert query(url, "SELECT value FROM fleet_setting WHERE key = 'schema_compat'") == record
        with psycopg.connect(url, autocommit=True) as conn:
            assert row_counts(conn) == before
    query(url, "DELETE FROM instance")
    done = cli("migrate", url=url)
    assert done.code == 0, done.err
    assert migration.current_revision(url) == migration.build().needs
    assert cli("migrate", "--contract", url=url).code == 0
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
        # columns of later steps (a task's uuid is filled in when it is added)
        added = {
            "build_revision",
            "history_retention",
            "source",
            "uuid",
            "idempotency_key",
            "in_process",
            "followed_at",
            "notify_url",
            "notify_headers",
            "notify_header_refs",
            "notify_on",
            "deadline",
            "backoff_max",
            "retry_delay",
            "spread",
            "spread_offset",
            "paused_until",
            "args",
        }
        return {
            "task": [
                {k: v for k, v in r.items() if k not in added}
                for r in query(url, "SELECT * FROM task ORDER BY id")
            ],
            "occurrence": [
                {k: v for k, v in r.items() if k not in added}
                for r in query(url, "SELECT * FROM occurrence ORDER BY id")
            ],
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
