"""The compatibility contract against a real database: `migrate --check` exit codes, the
record `migrate` writes, and what `status` shows (ADR 0002)."""

import json

import pytest

from scheduler_daemon.storage import migration
from tests.support import query

pytestmark = pytest.mark.smoke


def _plant(url: str, revision: str, oldest: str) -> None:
    """Makes the database look migrated by a newer build: a revision this build does not know."""
    query(url, f"UPDATE {migration.VERSION_TABLE} SET version_num = %s", (revision,))
    record = {"revision": revision, "oldest_build": oldest, "contract_pending": []}
    query(
        url,
        "UPDATE fleet_setting SET value = %s::jsonb WHERE key = 'schema_compat'",
        (json.dumps(record),),
    )


def test_migrate_records_the_revision_and_the_oldest_build_allowed(database_url: str) -> None:
    (row,) = query(database_url, "SELECT value FROM fleet_setting WHERE key = 'schema_compat'")
    head = migration.head_revision()
    assert row["value"]["revision"] == head
    assert row["value"]["oldest_build"] == migration.build().oldest_build_at(head)


def test_migrate_check_accepts_a_newer_schema_that_records_this_build_as_compatible(
    cli, database_url: str
) -> None:
    _plant(database_url, "9999", migration.build().needs)
    result = cli("migrate", "--check")
    assert result.code == 0, result.err
    assert "this build" in result.out
    assert cli("migrate").code == 0  # nothing to do, and nothing it could do
    (row,) = query(database_url, f"SELECT version_num FROM {migration.VERSION_TABLE}")
    assert row["version_num"] == "9999"


def test_migrate_check_exits_5_on_a_schema_past_this_build(cli, database_url: str) -> None:
    _plant(database_url, "9999", "9999")
    result = cli("migrate", "--check")
    assert result.code == 5
    assert result.err.strip().splitlines() == [
        f"error: the database schema is at 9999 and works with builds from schema 9999 on; "
        f"this build is at schema {migration.head_revision()}: upgrade it"
    ]
    assert cli("migrate").code == 5  # migrate refuses too, and writes nothing
    assert cli("status").code == 0  # status still shows the fleet


def test_status_shows_the_schemas_range_and_each_instances_compatibility(
    cli, database_url: str
) -> None:
    query(
        database_url,
        "INSERT INTO instance (id, hostname, pid, version, schema_revision, concurrency, "
        "lease_ttl, lease_grace, reconcile_interval) VALUES ('old-1', 'h', 1, '0.0.1', '0001', 1, "
        "'15s', '5s', '5s')",
    )
    status = cli("status", "--json").json()
    head = migration.head_revision()
    assert status["schema"]["revision"] == head
    assert status["schema"]["oldest_build"] == migration.build().oldest_build_at(head)
    (instance,) = status["instances"]
    assert (instance["schema_revision"], instance["compatible"]) == ("0001", False)
    text = cli("status").out
    assert f"schema at {head}: works with builds from schema" in text


def test_config_show_does_not_list_the_compatibility_record(cli) -> None:
    assert "schema" not in cli("config", "show").out


def test_downgrade_to_an_unknown_revision_is_bad_input_and_changes_nothing(
    cli, database_url: str
) -> None:
    result = cli("migrate", "--downgrade-to", "0042")
    assert (result.code, result.err) == (
        2,
        "error: --downgrade-to: this build has no revision '0042'\n",
    )
    assert migration.current_revision(database_url) == migration.head_revision()


def test_downgrade_to_a_revision_before_the_squash_is_refused_in_one_line(
    cli, database_url: str
) -> None:
    """Catches `--downgrade-to 0037` (history squashed into the baseline, issue 45) answered as
    a revision this build never had, without saying what to do instead."""
    result = cli("migrate", "--downgrade-to", "0037")
    assert (result.code, result.err) == (
        2,
        "error: --downgrade-to 0037: the history before the baseline was squashed (issue 45): "
        "restore the backup taken before `migrate`, or use a build from before the squash "
        "(61278d7)\n",
    )
    assert migration.current_revision(database_url) == migration.head_revision()


def test_a_schema_from_before_the_squash_is_behind_and_migrate_check_says_how(
    cli, database_url: str
) -> None:
    """Catches a database at 0037 (its record: oldest build 0005) judged too new (exit 5), and
    one at 0019 sent to this build's `migrate`, which cannot take it."""
    _plant(database_url, "0037", "0005")
    at_head = cli("migrate", "--check")
    assert at_head.code == 4, at_head.err
    assert at_head.err.strip().endswith("run `scheduler-daemon migrate` with the fleet stopped")
    _plant(database_url, "0019", "0005")
    older = cli("migrate")
    assert older.code == 4, older.err
    assert older.err.strip().splitlines() == [
        "error: the database schema is at 0019, from before the squash: migrate it to 0037 with "
        "a build from before the squash (61278d7) first, then run `scheduler-daemon migrate` "
        "with this build"
    ]
    assert migration.current_revision(database_url) == "0019"
    _plant(database_url, "0037", "0005")
    below = cli("migrate", "--downgrade-to", "0038")
    assert below.code == 4, below.err
    assert migration.current_revision(database_url) == "0037"


def test_migrate_at_head_has_nothing_to_apply(cli) -> None:
    result = cli("migrate")
    assert result.code == 0, result.err
    assert "nothing to apply" in result.out
