"""The schema's shape (issue 47 item 5, ADR 0027 "as built"): `migrate` records the digest the
server takes of the tables, columns, constraints, indexes, triggers and views, and a database at
a revision whose shape this build knows but of another shape (made at `0038` by an earlier,
unreleased build, or changed by hand) is refused in one line, exit 12, by `migrate`, `migrate
--check` and `run` (and `audit`, which judges the record alone), before anything is written.

The refusal tests and the fresh migrate's fail on the code before the shape (4de9711, with
only the test's own imports shimmed): there `migrate` said `schema at 0038: nothing to apply`
(exit 0), on a database lacking what this build adds, and recorded no shape; `run` then started
on it and failed in the middle of the first pass that needed a missing column."""

import importlib.util
from typing import Any

import psycopg
import pytest

from scheduler_daemon import embedded
from scheduler_daemon.cli.base import EXIT_SCHEMA_SHAPE
from scheduler_daemon.storage import migration
from scheduler_daemon.storage.shape import SHAPES, shape_of
from tests.conftest import row_counts
from tests.support import query

pytestmark = pytest.mark.smoke

RECORD = "SELECT value, updated_at FROM fleet_setting WHERE key = 'schema_compat'"
# A function whose recorded checksum no longer holds: a `migrate` that went on would re-create
# it (ADR 0028) and rewrite this comment; a refusal leaves it.
UNRECORDED = (
    "COMMENT ON FUNCTION sd_end_pause_v1(bigint, timestamptz, text, text) IS 'changed by hand'"
)
COMMENT = (
    "SELECT obj_description('sd_end_pause_v1(bigint, timestamptz, text, text)'::regprocedure, "
    "'pg_proc') AS c"
)


def _shape(url: str) -> str:
    with psycopg.connect(url) as conn:
        return shape_of(conn)


def _recorded(url: str) -> Any:
    return query(url, RECORD)[0]["value"].get("shape")


def _written(url: str) -> dict[str, Any]:
    """Everything a `migrate` or a `run` would write: rows, the record, the functions' records,
    the settings' history and the revision. Not fleet_epoch: `run` sights the server's epoch on
    its first connection, before it judges the schema (issue 32), whatever it then finds."""
    with psycopg.connect(url, autocommit=True) as conn:
        counts = row_counts(conn)
    return {
        "rows": counts,
        "record": query(url, RECORD),
        "comment": query(url, COMMENT),
        "events": query(url, "SELECT count(*) AS n FROM fleet_setting_event"),
        "revision": migration.current_revision(url),
    }


def test_a_fresh_migrate_records_the_shape_this_build_knows_and_is_accepted(
    cli, empty_database_url: str
) -> None:
    url = empty_database_url
    head = migration.head_revision()
    done = cli("migrate", url=url)
    assert done.code == 0, done.err
    assert _recorded(url) == SHAPES[head] == _shape(url)
    check = cli("migrate", "--check", "--json", url=url)
    assert check.code == 0, check.err
    assert check.json()["shape"] == check.json()["this_build_shape"] == SHAPES[head]
    again = cli("migrate", url=url)
    assert again.code == 0, again.err
    assert again.out.startswith(f"schema at {head}: nothing to apply")
    assert cli("audit", url=url).code == 0


def _other_build(url: str) -> None:
    """Yesterday's database at 0038: without a column today's build added, and recorded by a
    build from before the shape (no `shape` in its record)."""
    query(url, "ALTER TABLE operator_action DROP COLUMN session_role")
    query(url, "UPDATE fleet_setting SET value = value - 'shape' WHERE key = 'schema_compat'")


def _shape_changed(url: str) -> None:
    query(
        url,
        "UPDATE fleet_setting SET value = jsonb_set(value, '{shape}', to_jsonb(%s::text)) "
        "WHERE key = 'schema_compat'",
        ("0123456789ab" + "0" * 52,),
    )


def _column_dropped(url: str) -> None:
    query(url, "ALTER TABLE task DROP COLUMN notify_on")


def _index_dropped(url: str) -> None:
    query(url, "DROP INDEX task_due_marked_idx")


UNRELEASED = (
    "error: the database at {head} was made by an unreleased build with another schema (shape "
    "{recorded}, this build's {mine}): recreate it (drop and create the database; the embedded "
    "one: `scheduler-daemon db stop`, then delete its data directory) or use the build that "
    "made it"
)
BY_HAND = (
    "error: the database at {head} records this build's schema (shape {mine}) but has another "
    "(shape {live}): a table, column, constraint, index, trigger or view was changed since "
    "`migrate` made it; restore it as `scheduler-daemon migrate --sql` creates it, or recreate "
    "the database"
)


def _as_the_cli_prints(line: str) -> str:
    """On the embedded server, the line names its data directory: this process's, when the
    tests run on it (no SCHEDULER_TEST_DATABASE_URL), as a command's process names its own."""
    used = embedded.in_use()
    if len(used) != 1:
        return line
    return line.replace(
        "drop and create the database; the embedded one: `scheduler-daemon db stop`, then delete "
        "its data directory",
        f"the embedded server's: `scheduler-daemon db stop`, then delete {used[0]}",
    )


@pytest.mark.parametrize(
    ("change", "recorded"),  # recorded: the shape the line shows; None: recorded right
    [
        (_other_build, "none recorded"),
        (_shape_changed, "0123456789ab"),
        (_column_dropped, None),
        (_index_dropped, None),
    ],
    ids=["yesterdays-database", "shape-changed", "column-dropped", "index-dropped"],
)
def test_a_database_of_another_shape_is_refused_in_one_line_and_nothing_is_written(
    cli, database_url: str, change: Any, recorded: str | None, monkeypatch
) -> None:
    url = database_url
    line = BY_HAND if recorded is None else UNRELEASED

    def serving(*_: Any) -> None:
        raise AssertionError("the console served a database it should have refused")

    monkeypatch.setattr("scheduler_daemon.cli.console.serve", serving)
    head = migration.head_revision()
    change(url)
    query(url, UNRECORDED)
    before = _written(url)
    expected = _as_the_cli_prints(
        line.format(head=head, recorded=recorded, mine=SHAPES[head][:12], live=_shape(url)[:12])
    )
    commands = [("migrate",), ("migrate", "--contract"), ("migrate", "--check")]
    commands += [("run", "--poll-interval", "1s")]
    if importlib.util.find_spec("uvicorn") is not None:  # the `console` extra (else exit 11)
        commands += [("console", "--port", "0")]
    if line == UNRELEASED:  # `audit` judges the record alone: what a dropped index let in is
        commands += [("audit",)]  # what it may find (tests/integration/test_audit.py)
    else:
        assert cli("audit", url=url).code == 0
    for args in commands:
        result = cli(*args, url=url)
        audit = " (audit reads history this build understands)" if args == ("audit",) else ""
        # `run` logs the server's epoch it sighted first (fleet_epoch: issue 32), as before an
        # exit 4 or 5; the one `error:` line is its last.
        errors = [each for each in result.err.splitlines() if each.startswith("error:")]
        assert (result.code, errors) == (EXIT_SCHEMA_SHAPE, [expected + audit]), args
        assert result.err.endswith(expected + audit + "\n"), args
        assert _written(url) == before, args
    assert query(url, "SELECT count(*) AS n FROM instance") == [{"n": 0}]


@pytest.mark.parametrize(
    ("change", "counts"),
    [
        ("ALTER TABLE run ADD COLUMN note text", True),
        ("ALTER TABLE run ALTER COLUMN exit_code SET NOT NULL", True),
        ("ALTER TABLE instance ALTER COLUMN slots_in_use SET DEFAULT 1", True),
        ("ALTER TABLE run ALTER COLUMN exit_code TYPE bigint", True),
        ("ALTER TABLE occurrence DROP CONSTRAINT occurrence_lease_token_check", True),
        ("CREATE INDEX run_note_idx ON run (exit_code)", True),
        ("DROP TRIGGER task_event_on_insert ON task", True),
        ("DROP VIEW occurrence_args_shown", True),
        ("CREATE TABLE extra (id int)", True),
        # Not the shape: grants (`db roles` applies them again) and the functions' bodies
        # (`migrate` re-creates them from their files by checksum, ADR 0028).
        ("GRANT SELECT ON task TO PUBLIC", False),
        (
            "CREATE OR REPLACE FUNCTION sd_masked_v1(p_kind text, p_value jsonb) RETURNS jsonb "
            "LANGUAGE sql IMMUTABLE AS $$ SELECT '{}'::jsonb $$",
            False,
        ),
        (
            "INSERT INTO calendar (name, source_kind, first_day, last_day) "
            "VALUES ('c', 'dates', '2026-01-01', '2026-01-02')",
            False,
        ),
    ],
)
def test_the_shape_covers_tables_columns_constraints_indexes_triggers_and_views(
    database_url: str, change: str, counts: bool
) -> None:
    before = _shape(database_url)
    assert before == SHAPES[migration.head_revision()]
    query(database_url, change)
    assert (_shape(database_url) != before) is counts
