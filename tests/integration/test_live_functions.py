"""`migrate` at the head keeps the live functions equal to their files in sql/functions, and
writes nothing when they are (ADR 0028)."""

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler_daemon.storage import functions, migration
from scheduler_daemon.storage.database import connect
from tests.support import query

ROOT = Path(__file__).resolve().parents[2]
KEY = "sd_occurrence_key_v1(bigint, text, timestamptz)"
DEFINITION = "SELECT pg_get_functiondef(%s::regprocedure) AS d"


def _definition(url: str, signature: str) -> str:
    return str(query(url, DEFINITION, (signature,))[0]["d"])


def _change_by_hand(url: str) -> None:
    """The key function replaced, as an operator's hot fix would be (its comment stays)."""
    query(
        url,
        "CREATE OR REPLACE FUNCTION sd_occurrence_key_v1("
        "p_task_id bigint, p_trigger text, p_scheduled_for timestamptz) RETURNS text "
        "LANGUAGE sql AS $$ SELECT 'by hand' $$",
    )


@pytest.fixture
def ddl_log(database_url: str) -> Iterator[str]:
    """Every DDL command run in the database from now on, as rows of ddl_seen (an event
    trigger, so nothing escapes it: CREATE FUNCTION, COMMENT, ALTER, GRANT)."""
    query(
        database_url,
        """
        CREATE SCHEMA watch;
        CREATE TABLE watch.ddl_seen (tag text, object text);
        CREATE FUNCTION watch.seen() RETURNS event_trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO watch.ddl_seen SELECT command_tag, object_identity
            FROM pg_event_trigger_ddl_commands();
        END $$;
        CREATE EVENT TRIGGER watch_ddl ON ddl_command_end EXECUTE FUNCTION watch.seen();
        """,
    )
    yield database_url
    query(database_url, "DROP EVENT TRIGGER watch_ddl")


def _seen(url: str) -> list[tuple[str, str]]:
    rows = query(url, "DELETE FROM watch.ddl_seen RETURNING tag, object")
    return sorted((r["tag"], r["object"]) for r in rows)


def test_migrate_on_an_unchanged_database_runs_no_ddl(ddl_log: str, cli: Any) -> None:
    """Catches a refresh that re-creates (or comments) every function on every `migrate`: the
    second run below proves the event trigger sees such a re-create. The first `migrate` makes
    the history's partitions ahead (its upkeep, ADR 0033); the one after it has nothing to do."""
    assert cli("migrate", url=ddl_log).code == 0
    made = {o for tag, o in _seen(ddl_log) if tag == "CREATE TABLE"}
    assert any(o.startswith("public.occurrence_p") for o in made), made
    result = cli("migrate", url=ddl_log)
    assert result.code == 0, result.err
    assert result.out.strip().endswith("nothing to apply"), result.out
    assert _seen(ddl_log) == []

    _change_by_hand(ddl_log)
    assert [tag for tag, _ in _seen(ddl_log)] == ["CREATE FUNCTION"]
    again = cli("migrate", url=ddl_log)
    assert "functions re-created from sql/functions: occurrence_key.sql" in again.out
    assert [tag for tag, _ in _seen(ddl_log)] == ["COMMENT", "CREATE FUNCTION"]


def test_a_function_changed_by_hand_is_created_again_from_its_file(
    database_url: str, cli: Any
) -> None:
    """Catches a record of the file alone: CREATE OR REPLACE keeps a function's comment, so a
    function changed by hand would still carry its file's checksum and be left as it is."""
    made = _definition(database_url, KEY)
    _change_by_hand(database_url)
    assert "by hand" in _definition(database_url, KEY)

    result = cli("migrate", "--json", url=database_url)
    assert result.code == 0, result.err
    assert json.loads(result.out)["functions"] == ["occurrence_key.sql"]
    assert _definition(database_url, KEY) == made
    assert json.loads(cli("migrate", "--json", url=database_url).out)["functions"] == []


def test_an_edited_file_is_applied_by_migrate_at_the_head(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Until the first release a function is edited in place (ADR 0027): a database already at
    the head gets the edit from `migrate`, and only the edited function is created again."""
    shutil.copytree(ROOT / "sql", tmp_path / "sql")
    edited = tmp_path / "sql" / "functions" / "claim_launch.sql"
    text = edited.read_text()
    marker = "#variable_conflict use_column\n"
    assert text.count(marker) == 1
    edited.write_text(text.replace(marker, marker + "-- edited in place\n"))
    monkeypatch.setattr(functions, "resource_dir", lambda name: tmp_path / name)
    claim = functions.read(edited).signature

    report = migration.expand(database_url)
    assert (report.applied, report.functions) == ((), ("claim_launch.sql",))
    assert "-- edited in place" in _definition(database_url, claim)
    assert migration.expand(database_url).functions == ()

    monkeypatch.undo()  # this build's own file again: the edit is taken back
    assert migration.expand(database_url).functions == ("claim_launch.sql",)
    assert "-- edited in place" not in _definition(database_url, claim)


def test_the_baseline_records_its_functions_so_the_first_migrate_re_creates_none(
    empty_database_url: str, database_url: str
) -> None:
    """The baseline loads the files and records them itself (a server-side checksum of its
    definition, issue 45): the chain alone (alembic, no refresh) gives the definitions,
    privileges and comments that `migrate` leaves, and nothing is stale after it. Catches a
    record whose definition checksum differs from what storage/functions.py computes."""
    migration._command().upgrade(migration._config(empty_database_url), "head")
    catalog = (
        "SELECT p.proname, pg_get_functiondef(p.oid) AS def, p.proacl::text AS acl, "
        "obj_description(p.oid, 'pg_proc') AS comment "
        "FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace ORDER BY p.proname"
    )
    assert query(empty_database_url, catalog) == query(database_url, catalog)
    with connect(empty_database_url) as conn:
        assert functions.stale(conn, functions.files()) == []
