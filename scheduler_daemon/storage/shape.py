"""The shape of the schema (issue 47, ADR 0027 "as built"): a digest of its tables, columns,
constraints, indexes, triggers and views that the server takes (sql/schema_compat.sql
`schema_shape`), the shape this build knows at each revision, and the compatibility record a
baseline step writes with it.

Until 1.0.0 the baseline is edited in place, so a database made at `0038` by an earlier build
says `0038` and lacks what this one adds; its recorded shape (none, before issue 47) tells it
apart, and `migrate`, `run`, `console` and `audit` refuse it in one line, exit 12.
"""

from typing import Any

import psycopg

from scheduler_daemon.storage import query

SHAPES = {
    "0038": "d78627513175ad61fe6ff9be4f176e6ed86d9a4efb3ef2625801bb5d8dd2d808",
}
"""The shape of the schema at each revision whose shape this build knows, as `schema_shape`
takes it (the same on PostgreSQL 15 and 16). A schema edit that forgets to update it fails
tests/integration/test_migration.py, which prints the new value. From the first release on, a
released revision's shape is frozen; each later step adds its own."""


def shape_of(conn: psycopg.Connection[Any]) -> str:
    """The digest of the schema's shape as it is now: 5 ms of catalog reads."""
    return str(query.run(conn, "schema_shape"))


def baseline_record(revision: str) -> str:
    """The compatibility record of a schema that a baseline step just made at `revision` (the
    oldest build allowed to write is itself, nothing pending), with the shape the server takes
    of it: SQL alone, so the baseline and the path from 0037 end with it online and in `migrate
    --sql`, whoever applies it. `migrate` writes the record again after them, the same."""
    value = (
        f"jsonb_build_object('revision', '{revision}', 'oldest_build', '{revision}', "
        f"'contract_pending', '[]'::jsonb, 'shape', ({query.QUERIES['schema_shape'].sql}))"
    )
    return (
        "INSERT INTO fleet_setting (key, value, updated_at, updated_by)\n"
        f"SELECT 'schema_compat', {value}, now(), 'migration {revision}'\n"
        "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at,"
        "\n    updated_by = EXCLUDED.updated_by"
    )
