"""The four database roles and the least privileges each needs on this build's schema, as SQL.

Two steps, run by different roles (docs/operators/deploy.md#permissions): `creation` by an
administrator before the first `migrate` (the roles and the schema privileges), `grants` by the
schema owner after every `migrate` (table privileges, revoked and granted again so the result is
exactly this build's set). Identifiers go through `psycopg.sql`; no password is ever part of it.
"""

from dataclasses import dataclass, fields
from typing import Any

import psycopg
from psycopg import sql

from scheduler_daemon.storage.migration import VERSION_TABLE

# Every table of the schema at this build's head revision; a test keeps it equal to the database.
TABLES = (
    "task",
    "occurrence",
    "run",
    "instance",
    "fleet_setting",
    "task_event",
    "fleet_setting_event",
    "task_pruned",
    VERSION_TABLE,
)
# What each role may change beyond reading every table. Row locks (SELECT ... FOR UPDATE) need
# UPDATE. The event tables are written by triggers on task and fleet_setting that run as the
# writer, so a role that writes those tables needs INSERT (only) on the event table; their identity
# columns need no sequence privilege.
WRITES: dict[str, dict[str, tuple[str, ...]]] = {
    "daemon": {
        "task": ("UPDATE",),  # next fire time, lifecycle, outcome
        "task_event": ("INSERT",),  # parking a task it cannot plan fires the history trigger
        "occurrence": ("INSERT", "UPDATE", "DELETE"),  # DELETE: history past the retention
        "run": ("INSERT", "UPDATE", "DELETE"),
        "instance": ("INSERT", "UPDATE", "DELETE"),
        "task_pruned": ("INSERT", "UPDATE"),  # the prune's mark, an upsert (revision 0016)
    },
    "operator": {
        "task": ("INSERT", "UPDATE"),  # deletion is a soft delete
        "task_event": ("INSERT",),
        "occurrence": ("INSERT", "UPDATE"),  # trigger, cancel
        "run": ("UPDATE",),  # cancel
        "fleet_setting": ("INSERT", "UPDATE"),
        "fleet_setting_event": ("INSERT",),
    },
    "reader": {},
}


@dataclass(frozen=True)
class RoleNames:
    owner: str = "scheduler_owner"  # migrate; owns the tables
    daemon: str = "scheduler_daemon"  # run, recover
    operator: str = "scheduler_operator"  # tasks ..., runs cancel, config set
    reader: str = "scheduler_reader"  # status, lists, config show, audit, migrate --check

    def users(self) -> list[str]:
        """The roles that use the tables the owner owns."""
        return [self.daemon, self.operator, self.reader]

    def all(self) -> list[str]:
        return [getattr(self, f.name) for f in fields(self)]


def _names(names: list[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(n) for n in names)


def creation(names: RoleNames, schema: str = "public") -> list[sql.Composed]:
    """For an administrator (CREATEROLE, and the schema's owner): the roles, able to log in but
    without a password (set one with ALTER ROLE ... PASSWORD or psql's \\password), and the schema
    privileges: the owner may create in it, the others only use it."""
    statements: list[sql.Composed] = [
        sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)) for name in names.all()
    ]
    statements += [
        # PostgreSQL 14 and older let every role create tables in public; 15 no longer does.
        sql.SQL("REVOKE CREATE ON SCHEMA {} FROM PUBLIC").format(sql.Identifier(schema)),
        sql.SQL("GRANT USAGE, CREATE ON SCHEMA {} TO {}").format(
            sql.Identifier(schema), sql.Identifier(names.owner)
        ),
        sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
            sql.Identifier(schema), _names(names.users())
        ),
    ]
    return statements


def grants(names: RoleNames, schema: str = "public") -> list[sql.Composed]:
    """For the schema owner, after `migrate`: exactly this build's table privileges, table by
    table (what was granted before is revoked first)."""
    users = _names(names.users())
    statements: list[sql.Composed] = []
    for table in TABLES:
        target = sql.Identifier(schema, table)
        statements += [
            sql.SQL("REVOKE ALL ON {} FROM {}").format(target, users),
            sql.SQL("GRANT SELECT ON {} TO {}").format(target, users),
        ]
        for kind, writes in WRITES.items():
            if table in writes:
                statements.append(
                    sql.SQL("GRANT {} ON {} TO {}").format(
                        sql.SQL(", ").join(sql.SQL(p) for p in writes[table]),
                        target,
                        sql.Identifier(getattr(names, kind)),
                    )
                )
    return statements


def script(statements: list[sql.Composed]) -> str:
    """The statements as SQL text, one per line, for review or `psql -f`."""
    return "".join(f"{s.as_string()};\n" for s in statements)


def apply(conn: psycopg.Connection[Any], statements: list[sql.Composed]) -> None:
    """Runs the statements in one transaction: all of them or none."""
    with conn.transaction():
        for statement in statements:
            conn.execute(statement)
