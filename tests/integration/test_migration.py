"""Migrations: upgrade → downgrade → upgrade, `migrate --check/--sql`, the schema snapshot, and
the shape this build knows (storage/shape.py)."""

from pathlib import Path

import psycopg
import pytest

from scheduler_daemon.storage import migration
from scheduler_daemon.storage.shape import SHAPES, shape_of
from tests.schema_snapshot import dump

pytestmark = pytest.mark.smoke
SNAPSHOT = Path(__file__).resolve().parents[2] / "sql" / "schema.sql"


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
    return {r[0] for r in rows}


def test_upgrade_downgrade_upgrade_leaves_the_same_schema(empty_database_url: str) -> None:
    migration.upgrade(empty_database_url)
    first = dump(empty_database_url)
    assert {"task", "occurrence", "run", "instance", "fleet_setting"} <= _tables(empty_database_url)
    migration.downgrade(empty_database_url, "base")
    assert _tables(empty_database_url) == {migration.VERSION_TABLE}
    assert migration.current_revision(empty_database_url) is None
    migration.upgrade(empty_database_url)
    assert dump(empty_database_url) == first
    assert migration.current_revision(empty_database_url) == migration.head_revision()


def test_migrate_check_exits_4_when_behind_and_0_at_head(empty_database_url: str, cli) -> None:
    behind = cli("migrate", "--check", url=empty_database_url)
    assert behind.code == 4, behind.err
    assert "schema at nothing" in behind.out
    assert behind.err.startswith("error: the database schema is at nothing")
    assert cli("migrate", "--contract", url=empty_database_url).code == 0
    at_head = cli("migrate", "--check", url=empty_database_url)
    assert at_head.code == 0, at_head.err
    assert migration.head_revision() in at_head.out


def test_migrate_sql_prints_the_ddl_without_a_database(cli) -> None:
    result = cli("migrate", "--sql", url="postgresql://nobody@127.0.0.1:1/none")
    assert result.code == 0
    assert "CREATE TABLE task" in result.out
    assert "-- step 0038 (baseline): Baseline: the whole schema before the first release" in (
        result.out
    )
    assert "firing_key_pkey" in result.out
    # The live functions' files close it: an edited file is applied by `migrate` at the head.
    for path in (SNAPSHOT.parent / "functions").iterdir():
        assert f"-- function {path.name} (at the head, where it differs)\n" in result.out
    # Then the path from 0037, for databases from before the squash (issue 45), in one
    # transaction that ends by moving the version row.
    path = result.out[result.out.index("-- from 0037 (pre-release databases") :]
    assert "DROP FUNCTION %s" in path
    assert "task_pause_clears_until" in path
    assert path.rstrip().endswith("SET version_num = '0038';\nCOMMIT;")
    # Both the baseline and the path record the shape the server takes (issue 47), so a schema
    # applied from this SQL by hand is accepted too.
    assert result.out.count("SELECT 'schema_compat', jsonb_build_object('revision', '0038'") == 2


def test_schema_snapshot_matches_the_migrations(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        major = conn.info.server_version // 10000
    if major != 15:
        pytest.skip(f"the snapshot is rendered by PostgreSQL 15's catalog functions, not {major}")
    assert dump(database_url) == SNAPSHOT.read_text(), (
        "sql/schema.sql is stale: regenerate it with python -m tests.schema_snapshot URL"
    )


def test_the_shape_this_build_knows_is_the_shape_its_migrations_make(database_url: str) -> None:
    """Fails when a schema edit forgets SHAPES, with the value to set (as the snapshot above)."""
    head = migration.head_revision()
    with psycopg.connect(database_url) as conn:
        now = shape_of(conn)
        recorded = conn.execute(
            "SELECT value->>'shape' FROM fleet_setting WHERE key = 'schema_compat'"
        ).fetchone()
    assert SHAPES.get(head) == now, (
        f"the schema at {head} has another shape: set SHAPES['{head}'] = '{now}' in "
        "scheduler_daemon/storage/shape.py (until 1.0.0; from it on, a released revision's "
        "shape is frozen and a schema change is a new step with a shape of its own)"
    )
    assert recorded == (now,)
