"""Expand and contract on a real database, on a synthetic chain (issue 45: the real one is a
single baseline until the first release): a temp copy of migrations/ plus 9001 (expand), 9002
(contract) and 9003 (expand). `migrate` applies what this build needs (an earlier release's
contract step included, under the instance check) and leaves trailing contract steps,
`--contract` refuses while an older build is registered, and a downgrade and upgrade keep the
data."""

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from scheduler_daemon.storage import migration
from scheduler_daemon.storage.resource import resource_dir
from tests.conftest import row_counts
from tests.support import query

pytestmark = pytest.mark.smoke
OLD = migration.BASELINE  # the build before the synthetic expand/contract pair

STEP = '''"""{doc}"""

from alembic import op

revision = "{revision}"
down_revision = "{parent}"
branch_labels = None
depends_on = None
phase = "{phase}"


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("{up}")


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("{down}")
'''
SYNTHETIC = [
    (
        "9001",
        "expand",
        "Expand: a column older builds never read.",
        "ALTER TABLE task ADD COLUMN synthetic text",
        "ALTER TABLE task DROP COLUMN IF EXISTS synthetic",
    ),
    (
        "9002",
        "contract",
        "Contract: a rule older builds would break.",
        "ALTER TABLE task ADD CONSTRAINT task_synthetic_check "
        "CHECK (synthetic IS DISTINCT FROM 'old') NOT VALID",
        "ALTER TABLE task DROP CONSTRAINT IF EXISTS task_synthetic_check",
    ),
    (
        "9003",
        "expand",
        "Expand: a second column, after the contract step.",
        "ALTER TABLE task ADD COLUMN synthetic_more text",
        "ALTER TABLE task DROP COLUMN IF EXISTS synthetic_more",
    ),
]


@pytest.fixture
def chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], None]]:
    """This build's migrations in a temp copy; `chain(n)` adds the first n synthetic steps."""
    shutil.copytree(resource_dir("migrations"), tmp_path / "migrations")
    parent = migration.build().head

    def install(count: int) -> None:
        nonlocal parent
        for revision, phase, doc, up, down in SYNTHETIC[:count]:
            text = STEP.format(
                doc=doc, revision=revision, parent=parent, phase=phase, up=up, down=down
            )
            (tmp_path / "migrations" / "versions" / f"{revision}_synthetic.py").write_text(text)
            parent = revision
        migration.build.cache_clear()

    monkeypatch.setattr(migration, "resource_dir", lambda name: tmp_path / name)
    migration.build.cache_clear()
    yield install
    monkeypatch.undo()
    migration.build.cache_clear()


def _old_instance(url: str) -> None:
    query(
        url,
        "INSERT INTO instance (id, hostname, pid, version, schema_revision, concurrency, "
        "lease_ttl, lease_grace, reconcile_interval) VALUES ('old-1', 'h', 1, '0.1.0', %s, 1, "
        "'15s', '5s', '5s')",
        (OLD,),
    )


def test_migrate_applies_the_expand_steps_before_a_contract_step_and_leaves_trailing_ones(
    cli, empty_database_url, chain
) -> None:
    chain(2)  # 9001 expand, 9002 contract
    url = empty_database_url
    migration.upgrade(url, OLD)
    result = cli("migrate", url=url)
    assert result.code == 0, result.err
    assert migration.current_revision(url) == "9001"
    assert "contract step(s) 9002 pending" in result.out
    schema = cli("migrate", "--check", "--json", url=url).json()
    assert schema["contract_pending"] == ["9002"]
    assert schema["oldest_build"] == OLD


def test_migrate_refuses_an_earlier_contract_step_this_build_needs_while_an_old_instance_runs(
    cli, empty_database_url, chain
) -> None:
    # Would fail against an expand-only `migrate` that stopped before the earlier release's
    # contract step (9002) and left this build (which needs 9003) refusing its schema as
    # behind; and against a `migrate` that ran that contract step without the instance check.
    chain(3)
    url = empty_database_url
    migration.upgrade(url, "9001")
    _old_instance(url)
    record = query(url, "SELECT value FROM fleet_setting WHERE key = 'schema_compat'")
    with psycopg.connect(url, autocommit=True) as conn:
        before = row_counts(conn)
    for args in (("migrate",), ("migrate", "--contract")):
        result = cli(*args, url=url)
        assert result.code == 6, (args, result.out, result.err)
        assert result.err.count("\n") == 1
        assert f"old-1 (version 0.1.0, schema {OLD})" in result.err
        assert migration.current_revision(url) == "9001"  # nothing applied
        assert query(url, "SELECT value FROM fleet_setting WHERE key = 'schema_compat'") == record
        with psycopg.connect(url, autocommit=True) as conn:
            assert row_counts(conn) == before
    query(url, "DELETE FROM instance")
    done = cli("migrate", url=url)
    assert done.code == 0, done.err
    assert migration.current_revision(url) == "9003"
    assert cli("migrate", "--contract", url=url).code == 0
    assert migration.current_revision(url) == migration.head_revision() == "9003"


def test_upgrade_downgrade_upgrade_keeps_tasks_occurrences_and_runs(
    cli, empty_database_url, chain
) -> None:
    chain(3)
    url = empty_database_url
    migration.upgrade(url, OLD)
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
        "takeover_at, status, finished_at, build_revision) SELECT id, 1, 'old', 1, now(), "
        "now(), 'success', now(), '0038' FROM occurrence",
    )

    def rows() -> dict[str, list[dict]]:
        added = {"synthetic", "synthetic_more"}  # the synthetic steps' columns
        return {
            table: [
                {k: v for k, v in r.items() if k not in added}
                for r in query(url, f"SELECT * FROM {table} ORDER BY id")
            ]
            for table in ("task", "occurrence", "run")
        }

    first = rows()
    migration.upgrade(url)
    assert migration.current_revision(url) == "9003"
    assert rows() == first
    migration.downgrade(url, OLD)
    assert rows() == first
    assert migration.current_revision(url) == OLD
    migration.upgrade(url)
    assert rows() == first
    assert migration.current_revision(url) == migration.head_revision()
