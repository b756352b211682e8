"""The four database roles and the least privileges each needs on this build's schema, as SQL.

Two steps, run by different roles (docs/operators/deploy.md#permissions): `creation` by an
administrator before the first `migrate` (the roles and the schema privileges), `grants` by the
schema owner after every `migrate` (table privileges, revoked and granted again so the result is
exactly the set the builds the schema admits need). `apply` runs either, and refuses, changing
nothing, when the connected role cannot grant what it would (PostgreSQL only warns then).
Identifiers go through `psycopg.sql`; no password is ever part of it.
"""

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import psycopg
from psycopg import sql

from scheduler_daemon.domain.schema_compat import Build
from scheduler_daemon.storage import migration, query
from scheduler_daemon.storage.error import SchemaTooNew, StorageError
from scheduler_daemon.storage.migration import VERSION_TABLE

# Every table of the schema at this build's head revision; a test keeps it equal to the database.
# `occurrence` and `run` are partitioned (issue 47): every statement names the parent (the hot
# ones ask `finished_at IS NULL`, which prunes to the default partition), so only the parent is
# granted, and a partition the upkeep makes needs no grant.
TABLES = (
    "task",
    "occurrence",
    "run",
    "firing_key",
    "instance",
    "fleet_setting",
    "task_event",
    "fleet_setting_event",
    "task_pruned",
    "fleet_epoch",
    "notification_outbox",
    "operator_action",
    "deadline_mark",
    "partition_upkeep",  # written only by sd_partitions_v1, as the owner
    "calendar",
    "calendar_date",
    "task_calendar",
    VERSION_TABLE,
)
# The views of the secret columns (ADR 0031, migrations/versions/0038_baseline.py VIEWS): every
# role may select them; each shows a column unmasked only to a role that may select it.
VIEWS = (
    "task_secret_shown",
    "occurrence_args_shown",
    "fleet_setting_shown",
    "fleet_setting_event_shown",
)
# The columns the reader may not select (ADR 0031): what runs a job or reaches a webhook with
# its credentials (a task's payload: its URL and headers; its notify URL and headers; a trigger's
# arguments; the fleet's settings, notify URL and headers among them, and their history). It
# reads them masked through VIEWS; every other column of these tables it may select. The
# daemon and the operator select every column.
SECRET_COLUMNS: dict[str, tuple[str, ...]] = {
    "task": ("payload", "notify_url", "notify_headers"),
    "occurrence": ("args",),
    "fleet_setting": ("value",),
    "fleet_setting_event": ("value",),
}
# What each role may change beyond reading every table. Row locks (SELECT ... FOR UPDATE) need
# UPDATE on at least one column. The event tables are written by triggers on task and
# fleet_setting that run as the writer, so a role that writes those tables needs INSERT (only) on
# the event table; their identity columns need no sequence privilege. An UPDATE listed here is on
# the whole table unless COLUMNS limits it.
WRITES: dict[str, dict[str, tuple[str, ...]]] = {
    "daemon": {
        "task": ("UPDATE",),  # only the columns in COLUMNS: never what a job runs, or when
        "task_event": ("INSERT",),  # parking a task it cannot plan fires the history trigger
        # The daemon inserts and deletes rows of these three (dispatch, claim, registration,
        # prune), and nothing in them is run: what a job runs is read from task alone. Limiting
        # their UPDATE to columns would guard nothing that INSERT and DELETE leave open.
        # DELETE: history past the retention, and a row's end (a move: deleted from the hot set,
        # inserted again through the parent).
        "occurrence": ("INSERT", "UPDATE", "DELETE"),
        "run": ("INSERT", "UPDATE", "DELETE"),
        "firing_key": ("INSERT", "DELETE"),  # dispatch (guarantee 2); the prune deletes keys
        "instance": ("INSERT", "UPDATE", "DELETE"),
        "task_pruned": ("INSERT", "UPDATE"),  # the prune's mark, an upsert
        "fleet_epoch": ("INSERT",),  # a reconcile pass's first sighting
        # A finished firing's notifications, written beside its outcome, then claimed and
        # recorded by the deliverer (UPDATE of COLUMNS only); the prune deletes them with the
        # occurrence (in its statement: no foreign key refers to a partitioned occurrence), and
        # those written before their firing had a row. DELETE opens nothing new: deleting the
        # occurrence removes its notifications.
        "notification_outbox": ("INSERT", "UPDATE", "DELETE"),
        # The deadline scan's mark, raised after each window it judged.
        "deadline_mark": ("UPDATE",),
    },
    "operator": {
        "task": ("INSERT", "UPDATE"),  # deletion is a soft delete
        "task_event": ("INSERT",),
        # trigger, cancel; DELETE: a cancelled occurrence ends by a move (issue 47)
        "occurrence": ("INSERT", "UPDATE", "DELETE"),
        "run": ("UPDATE",),  # cancel
        "firing_key": ("INSERT",),  # backfill (guarantee 2)
        "fleet_setting": ("INSERT", "UPDATE"),
        "fleet_setting_event": ("INSERT",),
        # What an operator did, recorded by the CLI and the console: appended, never changed.
        "operator_action": ("INSERT",),
        # Exclusion calendars: `calendars add/delete` and a task's `--exclude-calendar`. The
        # daemon and the reader only read them.
        "calendar": ("INSERT", "UPDATE", "DELETE"),
        "calendar_date": ("INSERT", "DELETE"),
        "task_calendar": ("INSERT", "DELETE"),
    },
    "reader": {},
}
# The SECURITY DEFINER functions (each a change a role may make only through them) and the one
# role that may execute each; PUBLIC and the others may not.
DEFINER_FUNCTIONS = {
    # Ends a `--until` pause whose instant passed: the daemon may not write `paused` nor
    # insert into operator_action otherwise.
    "sd_end_pause_v1(bigint, timestamptz, text, text)": "daemon",
    # The history's partition upkeep (ADR 0033): the daemon may neither create nor drop tables.
    "sd_partitions_v1(interval, interval, interval)": "daemon",
}


@dataclass(frozen=True)
class Column:
    """A column a role updates. `last_build` is the newest build head (a revision) that still
    writes it; None: this build does too. A build whose successor stops writing a column sets it
    here; once a contract step raises the schema's oldest admitted build past it, the `db roles`
    run after that `migrate --contract` no longer grants it."""

    name: str
    last_build: str | None = None


# UPDATE limited to columns, per role and table: the union of what every build the schema still
# admits writes (ADR 0002, between published releases: ADR 0027). Older builds that are still
# admitted must never meet `permission denied` mid-upgrade, so a column leaves only with the
# build that last wrote it (`Column.last_build`). Read from sql/*.sql and the sd_* functions
# that run as the caller: this build writes exactly these.
COLUMNS: dict[str, dict[str, tuple[Column, ...]]] = {
    "daemon": {
        "task": (
            # The dispatcher moves the task on: occurrence_dispatch (task_next_seq and
            # task_advance before it), a one-shot's status.
            Column("occurrence_seq"),
            Column("next_run_at"),
            Column("status"),
            Column("updated_at"),
            # A final outcome shown on its task: sd_show_outcomes_v1 (task_record_outcome_many,
            # sd_succeed_runs_v4 for one-shots); a one-shot's end: task_finish_lifecycle.
            Column("last_outcome_seq"),
            Column("last_occurrence_id"),
            Column("last_scheduled_for"),
            Column("last_status"),
            Column("last_finished_at"),
            Column("last_error"),
            # A task the dispatcher or completer cannot plan or store: task_park.
            Column("parked_at"),
            Column("park_error"),
        ),
        # The deliverer's claim (a lease and the attempt) and its record: never what a
        # notification says, or where it goes.
        "notification_outbox": (
            Column("attempts"),
            Column("next_attempt_at"),
            Column("delivered_at"),
            Column("last_error"),
        ),
        "deadline_mark": (Column("judged_through"), Column("updated_at")),
    },
}


class CannotGrant(StorageError):
    """The connected role cannot grant (or revoke) what `db roles` would; nothing changed."""


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


def widest_window(build: Build | None = None) -> str:
    """The oldest build head any schema this build works with may still admit: the one the
    schema records before this build's pending contract steps run. What `--sql` grants for."""
    build = build or migration.build()
    return build.oldest_build_at(build.needs)


def updated_columns(
    kind: str, table: str, oldest_build: str, build: Build | None = None
) -> tuple[str, ...] | None:
    """The columns of `table` the role `kind` may update when builds from `oldest_build` on are
    admitted; None when its UPDATE (if any) is on the whole table."""
    limited = COLUMNS.get(kind, {}).get(table)
    if limited is None:
        return None
    build = build or migration.build()
    oldest = build.index(oldest_build)
    return tuple(
        c.name for c in limited if c.last_build is None or build.index(c.last_build) >= oldest
    )


def _reader_select(names: RoleNames, schema: str, table: str) -> sql.Composed:
    """SELECT on every column of `table` but its SECRET_COLUMNS, for the reader: the columns as
    the database has them when `db roles` runs (a column a later migration adds is granted by
    the `db roles` after it), so the statement is a DO block that reads them."""
    target = sql.Identifier(schema, table).as_string(None)
    return sql.SQL(
        "DO $grant$ BEGIN EXECUTE (SELECT format('GRANT SELECT (%s) ON %s TO %I', "
        "string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum), {}, {}) "
        "FROM pg_attribute a WHERE a.attrelid = {}::regclass AND a.attnum > 0 "
        "AND NOT a.attisdropped AND a.attname <> ALL (ARRAY[{}]::text[])); END $grant$"
    ).format(
        sql.Literal(target),
        sql.Literal(names.reader),
        sql.Literal(target),
        sql.SQL(", ").join(sql.Literal(c) for c in SECRET_COLUMNS[table]),
    )


def grants(
    names: RoleNames, schema: str = "public", oldest_build: str | None = None
) -> list[sql.Composed]:
    """For the schema owner, after `migrate`: exactly the table privileges the builds from
    `oldest_build` on need (default: the widest window this build can meet), table by table
    (what was granted before, column privileges included, is revoked first): SELECT on every
    table and view, but for the reader on the SECRET_COLUMNS (ADR 0031)."""
    oldest = oldest_build or widest_window()
    users = _names(names.users())
    writers = _names([names.daemon, names.operator])
    statements: list[sql.Composed] = []
    for view in VIEWS:
        target = sql.Identifier(schema, view)
        statements += [
            sql.SQL("REVOKE ALL ON {} FROM {}").format(target, users),
            sql.SQL("GRANT SELECT ON {} TO {}").format(target, users),
        ]
    for table in TABLES:
        target = sql.Identifier(schema, table)
        statements.append(sql.SQL("REVOKE ALL ON {} FROM {}").format(target, users))
        if table in SECRET_COLUMNS:
            statements += [
                sql.SQL("GRANT SELECT ON {} TO {}").format(target, writers),
                _reader_select(names, schema, table),
            ]
        else:
            statements.append(sql.SQL("GRANT SELECT ON {} TO {}").format(target, users))
        for kind, writes in WRITES.items():
            if table not in writes:
                continue
            role = sql.Identifier(getattr(names, kind))
            columns = updated_columns(kind, table, oldest)
            whole = [p for p in writes[table] if columns is None or p != "UPDATE"]
            if whole:
                statements.append(
                    sql.SQL("GRANT {} ON {} TO {}").format(
                        sql.SQL(", ").join(sql.SQL(p) for p in whole), target, role
                    )
                )
            if columns:
                statements.append(
                    sql.SQL("GRANT UPDATE ({}) ON {} TO {}").format(
                        _names(list(columns)), target, role
                    )
                )
    for function, kind in DEFINER_FUNCTIONS.items():
        name, _, arguments = function.partition("(")
        function_ = sql.SQL("{}({}").format(sql.Identifier(schema, name), sql.SQL(arguments))
        statements += [
            sql.SQL("REVOKE ALL ON FUNCTION {} FROM PUBLIC, {}").format(function_, users),
            sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {}").format(
                function_, sql.Identifier(getattr(names, kind))
            ),
        ]
    return statements


def script(statements: list[sql.Composed]) -> str:
    """The statements as SQL text, one per line, for review or `psql -f`."""
    return "".join(f"{s.as_string()};\n" for s in statements)


def admitted_oldest_build(conn: psycopg.Connection[Any]) -> str:
    """The oldest build head the database's schema admits, for `grants`. Raises SchemaBehind
    or SchemaTooNew (as `run` would) unless this build works with the schema: a build that is
    behind lacks its tables, and one that is too new to know the schema cannot know what the
    newer builds it admits write, so granting its own set could take their privileges away."""
    found = migration.state_of(conn)
    migration.raise_unless_compatible(found.verdict)
    build = migration.build()
    if found.current is not None and not build.knows(found.current):
        raise SchemaTooNew(
            f"the database schema is at {found.current}, newer than this build (schema "
            f"{build.head}), which cannot know what the newer builds write: run `db roles` "
            "with the newest build"
        )
    oldest = found.fields()["oldest_build"]
    assert oldest is not None  # a schema this build works with is at a revision it knows
    return str(oldest)


def check_can_grant(conn: psycopg.Connection[Any], schema: str, *, create: bool) -> None:
    """Raises CannotGrant unless the connected role may do what `creation` (`create`) or
    `grants` does: create roles and grant on the schema as its owner, or grant on every table
    as its owner. PostgreSQL would only warn and grant nothing."""
    if create:
        row = query.run(conn, "roles_creator", {"schema": schema})
        if row is None:
            raise CannotGrant(f"db roles: there is no schema {schema!r}; nothing was changed")
        if not row["can_create"] or not row["can_grant"]:
            raise CannotGrant(
                f"db roles --create: role {row['role_name']!r} cannot create roles or grant on "
                f"schema {schema!r} (owned by {row['owner']!r}): run it as an administrator with "
                "CREATEROLE that owns the schema, or a superuser; nothing was changed"
            )
        return
    rows = query.run(conn, "roles_table_grantors", {"schema": schema, "tables": [*TABLES, *VIEWS]})
    others = [r for r in rows if not r["can_grant"]]
    if others:
        owners = sorted({r["owner"] for r in others})
        raise CannotGrant(
            f"db roles: role {others[0]['role_name']!r} cannot grant on "
            f"{', '.join(r['table_name'] for r in others)} (owned by {', '.join(owners)}): run it "
            "as the schema owner; nothing was changed"
        )


def apply(conn: psycopg.Connection[Any], statements: list[sql.Composed]) -> None:
    """Runs the statements in one transaction: all of them or none. A GRANT or REVOKE that
    PostgreSQL only warns about (SQLSTATE 01007 "no privileges were granted", 01006 "could not
    be revoked": the grantor lacks the grant option) raises CannotGrant and rolls all back."""
    refused: list[str] = []

    def keep(diagnostic: psycopg.errors.Diagnostic) -> None:
        if diagnostic.sqlstate in ("01006", "01007"):
            refused.append(diagnostic.message_primary or diagnostic.sqlstate)

    handler: Callable[[psycopg.errors.Diagnostic], None] = keep
    conn.add_notice_handler(handler)
    try:
        with conn.transaction():
            for statement in statements:
                conn.execute(statement)
                if refused:
                    raise CannotGrant(
                        f"db roles: role {conn.info.user!r} cannot grant: {refused[0]}; "
                        "nothing was changed"
                    )
    finally:
        conn.remove_notice_handler(handler)
