"""The four database roles of `scheduler-daemon db roles`, applied to a database of their own with
names unique to this run (roles are cluster-wide, and dropped afterwards): each role holds exactly
its privileges, the operator and real daemon processes do their work with theirs (a whole daemon
cycle included), the daemon role cannot change what a job runs or when, the reader reads
everything and writes nothing, neither the daemon nor the operator can change the schema, and
`db roles` run by a role that cannot grant fails and changes nothing."""

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from scheduler_daemon.storage import functions, roles
from tests.conftest import with_database
from tests.role_fleet import as_role as _as_role
from tests.role_fleet import command as _command
from tests.role_fleet import name_options as _name_options
from tests.support import DaemonProcess, processes_matching, query, wait_for

pytestmark = pytest.mark.slow
PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")


@dataclass(frozen=True)
class Fleet:
    names: roles.RoleNames
    url: Callable[[str], str]  # role name → URL of the fleet's database as that role
    admin_url: str


@pytest.fixture(scope="module")
def fleet(server_url: str) -> Iterator[Fleet]:
    """Roles created by the administrator, a database migrated by the owner, privileges granted
    by the owner: the steps of docs/operators/deploy.md, through the CLI."""
    tag = uuid.uuid4().hex[:8]
    names = roles.RoleNames(*(f"sdt_{tag}_{kind}" for kind in ("owner", "daemon", "op", "reader")))
    password = uuid.uuid4().hex
    database = f"sd_roles_{tag}"
    admin_url = with_database(server_url, database)
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    try:
        created = _command(admin_url, "db", "roles", "--create", *_name_options(names))
        assert created.returncode == 0, created.stderr
        with psycopg.connect(admin_url, autocommit=True) as conn:
            for name in names.all():
                conn.execute(
                    psycopg.sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                        psycopg.sql.Identifier(name), psycopg.sql.Literal(password)
                    )
                )
        fleet = Fleet(names, lambda role: _as_role(admin_url, role, password), admin_url)
        # --contract: expand steps after the pending contract 0005 need it (no old build here).
        migrated = _command(fleet.url(names.owner), "migrate", "--contract")
        assert migrated.returncode == 0, migrated.stderr
        granted = _command(fleet.url(names.owner), "db", "roles", *_name_options(names))
        assert granted.returncode == 0, granted.stderr
        assert granted.stdout.startswith("granted privileges to")
        yield fleet
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
            for name in names.all():
                conn.execute(
                    psycopg.sql.SQL("DROP ROLE IF EXISTS {}").format(psycopg.sql.Identifier(name))
                )


def _held(url: str, role: str) -> set[tuple[str, str]]:
    """(table, privilege) pairs `role` holds on the schema's tables."""
    rows = query(
        url,
        """
        SELECT t.table_name AS t, p AS privilege FROM information_schema.tables t,
            unnest(%(privileges)s::text[]) AS p
        WHERE t.table_schema = 'public'
          AND t.table_name NOT IN (SELECT relname FROM pg_class WHERE relispartition)
          AND has_table_privilege(%(role)s, format('public.%%I', t.table_name), p)""",
        {"privileges": list(PRIVILEGES), "role": role},
    )
    return {(r["t"], r["privilege"]) for r in rows}


def _updatable(url: str, role: str) -> set[tuple[str, str]]:
    """(table, column) pairs `role` may UPDATE, by a grant on the table or on the column."""
    rows = query(
        url,
        """
        SELECT table_name AS t, column_name AS c FROM information_schema.columns
        WHERE table_schema = 'public'
          AND has_column_privilege(%(role)s, format('public.%%I', table_name), column_name,
                                   'UPDATE')""",
        {"role": role},
    )
    return {(r["t"], r["c"]) for r in rows}


def _columns(url: str, table: str) -> set[str]:
    rows = query(
        url,
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = 'public' AND table_name = %s",
        (table,),
    )
    return {r["column_name"] for r in rows}


def test_the_grants_name_every_table_and_view_of_the_schema(fleet: Fleet) -> None:
    # The partitions of occurrence and run are left out: no statement names one, and only the
    # parents are granted (issue 47).
    rows = query(
        fleet.admin_url,
        "SELECT table_name, table_type FROM information_schema.tables "
        "WHERE table_schema = 'public' AND table_name NOT IN ("
        "SELECT relname FROM pg_class WHERE relispartition)",
    )
    assert {r["table_name"] for r in rows if r["table_type"] == "BASE TABLE"} == set(roles.TABLES)
    assert {r["table_name"] for r in rows if r["table_type"] == "VIEW"} == set(roles.VIEWS)


def _selectable(url: str, role: str, table: str) -> set[str]:
    """The columns of `table` that `role` may SELECT, by a grant on the table or the column."""
    rows = query(
        url,
        "SELECT column_name AS c FROM information_schema.columns "
        "WHERE table_schema = 'public' AND table_name = %(t)s "
        "AND has_column_privilege(%(role)s, format('public.%%I', table_name), column_name, "
        "'SELECT')",
        {"t": table, "role": role},
    )
    return {r["c"] for r in rows}


def test_each_role_holds_exactly_what_its_commands_need(fleet: Fleet) -> None:
    names = fleet.names
    everything = {(t, p) for t in (*roles.TABLES, *roles.VIEWS) for p in PRIVILEGES}
    assert _held(fleet.admin_url, names.owner) == everything  # it owns them
    oldest = roles.widest_window()  # nothing contracted here: this build's widest window
    for kind in ("daemon", "operator", "reader"):
        limited = roles.COLUMNS.get(kind, {})
        # The reader selects every column but the secret ones (ADR 0031): no table grant there.
        hidden = roles.SECRET_COLUMNS if kind == "reader" else {}
        expected = {(t, "SELECT") for t in (*roles.TABLES, *roles.VIEWS) if t not in hidden} | {
            (t, p)
            for t, ps in roles.WRITES[kind].items()
            for p in ps
            if not (p == "UPDATE" and t in limited)  # on columns, not on the table
        }
        assert _held(fleet.admin_url, getattr(names, kind)) == expected, kind
        # Nothing on a partition (issue 47): every statement names the parent.
        for partition in ("occurrence_active", "run_active"):
            assert not any(
                query(
                    fleet.admin_url,
                    "SELECT has_table_privilege(%s, %s, p) AS held FROM unnest(%s::text[]) p",
                    (getattr(names, kind), partition, list(PRIVILEGES)),
                )[i]["held"]
                for i in range(len(PRIVILEGES))
            ), (kind, partition)
        columns = {
            (t, c)
            for t, ps in roles.WRITES[kind].items()
            if "UPDATE" in ps
            for c in (
                roles.updated_columns(kind, t, oldest) or ()
                if t in limited
                else _columns(fleet.admin_url, t)
            )
        }
        assert _updatable(fleet.admin_url, getattr(names, kind)) == columns, kind
        for table in roles.SECRET_COLUMNS:
            every = _columns(fleet.admin_url, table)
            shown = every - set(hidden.get(table, ()))
            assert _selectable(fleet.admin_url, getattr(names, kind), table) == shown, kind


def test_granting_again_after_a_migrate_changes_nothing(fleet: Fleet) -> None:
    before = {r: _held(fleet.admin_url, r) for r in fleet.names.users()}
    again = _command(fleet.url(fleet.names.owner), "db", "roles", *_name_options(fleet.names))
    assert again.returncode == 0, again.stderr
    assert {r: _held(fleet.admin_url, r) for r in fleet.names.users()} == before


def test_only_an_administrator_can_create_the_roles(fleet: Fleet) -> None:
    refused = _command(
        fleet.url(fleet.names.owner), "db", "roles", "--create", "--owner", "sdt_never_created"
    )
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: db roles --create: role "), refused.stderr
    assert "cannot create roles" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1


@pytest.mark.parametrize("kind", ["daemon", "operator", "reader"])
def test_db_roles_by_a_role_that_cannot_grant_fails_with_one_line_and_changes_nothing(
    fleet: Fleet, kind: str
) -> None:
    """PostgreSQL grants nothing and only warns when the grantor lacks the grant option; before
    the check `db roles` printed `granted privileges to ...` and exited 0 all the same."""
    before = {r: _held(fleet.admin_url, r) for r in fleet.names.users()}
    refused = _command(
        fleet.url(getattr(fleet.names, kind)), "db", "roles", *_name_options(fleet.names)
    )
    assert refused.returncode == 1, refused.stdout
    assert refused.stdout == ""
    assert refused.stderr.startswith("error: db roles: role "), refused.stderr
    assert "run it as the schema owner; nothing was changed" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1
    assert {r: _held(fleet.admin_url, r) for r in fleet.names.users()} == before


def test_a_grant_postgresql_only_warns_about_fails_and_rolls_back_the_others(
    fleet: Fleet,
) -> None:
    """The second guard, for what the ownership check cannot see (a grantor with some privilege
    but no grant option): the warning itself fails `apply`, and what ran before it is undone."""
    from psycopg import sql

    from scheduler_daemon.storage.database import connect

    reader = fleet.names.reader
    query(fleet.admin_url, "CREATE SCHEMA sdt_elsewhere")
    try:
        query(fleet.admin_url, "CREATE TABLE sdt_elsewhere.t (id int)")
        query(fleet.admin_url, f'GRANT USAGE ON SCHEMA sdt_elsewhere TO "{fleet.names.owner}"')
        query(fleet.admin_url, f'GRANT SELECT ON sdt_elsewhere.t TO "{fleet.names.owner}"')
        statements = [
            sql.SQL("REVOKE ALL ON run FROM {}").format(sql.Identifier(reader)),
            sql.SQL("GRANT SELECT ON sdt_elsewhere.t TO {}").format(sql.Identifier(reader)),
        ]
        with (
            connect(fleet.url(fleet.names.owner), autocommit=True) as conn,
            pytest.raises(roles.CannotGrant, match="no privileges were granted"),
        ):
            roles.apply(conn, statements)
        assert ("run", "SELECT") in _held(fleet.admin_url, reader)  # the REVOKE was undone
    finally:
        query(fleet.admin_url, "DROP SCHEMA sdt_elsewhere CASCADE")


def test_db_roles_refuses_a_schema_newer_than_its_build(database_url: str) -> None:
    """A build that does not know the schema cannot know what the newer builds it admits write:
    granting its own set could take their privileges away mid-upgrade."""
    query(database_url, f"UPDATE {roles.VERSION_TABLE} SET version_num = '9999'")
    refused = _command(database_url, "db", "roles")
    assert refused.returncode == 5, refused.stdout + refused.stderr
    assert refused.stderr.startswith("error: the database schema is at 9999, newer than this"), (
        refused.stderr
    )
    assert "run `db roles` with the newest build" in refused.stderr


def test_the_operator_defines_work_that_a_daemon_of_the_daemon_role_runs(
    fleet: Fleet, cli, tmp_path
) -> None:
    operator, daemon = fleet.url(fleet.names.operator), fleet.url(fleet.names.daemon)
    steps = [
        ("tasks", "add", "tick", "--every", "1s", "--command", "true"),
        ("tasks", "add", "sleeper", "--every", "1h", "--command", "sleep 60"),
        ("tasks", "update", "tick", "--timeout", "30s"),
        ("tasks", "pause", "tick"),
        ("tasks", "resume", "tick"),
        ("config", "set", "max-concurrent-runs", "4"),
        ("tasks", "trigger", "sleeper"),
    ]
    for step in steps:
        result = cli(*step, url=operator)
        assert result.code == 0, (step, result.err)
    process = DaemonProcess(daemon, tmp_path, "roles-daemon")
    try:
        process.instance_id()
        sleeper = wait_for(
            lambda: query(
                fleet.admin_url,
                "SELECT r.id FROM run r JOIN occurrence o ON o.id = r.occurrence_id "
                "JOIN task t ON t.id = o.task_id WHERE t.name = 'sleeper' AND r.status = 'running'",
            ),
            message="the sleeper to run",
        )
        cancelled = cli("runs", "cancel", str(sleeper[0]["id"]), url=operator)
        assert cancelled.code == 0, cancelled.err
        wait_for(
            lambda: query(
                fleet.admin_url,
                "SELECT count(*) >= 3 AS ok FROM run WHERE status = 'success'",
            )[0]["ok"],
            message="three successful runs of tick",
        )
        # The daemon confirmed the cancel: the occurrence is no longer executing.
        wait_for(
            lambda: (
                not query(
                    fleet.admin_url,
                    "SELECT id FROM occurrence WHERE status IN ('launching', 'running') "
                    "AND cancel_requested_at IS NOT NULL",
                )
            ),
            message="the daemon to stop the cancelled job",
        )
    finally:
        assert process.stop() == 0, process.log()
    assert "permission denied" not in process.log(), process.log()
    recovered = cli("recover", "--json", url=daemon)
    assert recovered.code == 0, recovered.err
    assert cli("status", url=daemon).code == 0


def test_the_reader_reads_everything_and_writes_nothing(fleet: Fleet, cli) -> None:
    reader = fleet.url(fleet.names.reader)
    cli(
        "tasks",
        "add",
        "seen",
        "--every",
        "1h",
        "--command",
        "true",
        url=fleet.url(fleet.names.operator),
    )
    before = _row_counts(fleet.admin_url)
    reads = [
        ("status",),
        ("tasks", "list"),
        ("tasks", "show", "seen"),
        ("tasks", "next", "seen"),
        ("runs", "list"),
        ("config", "show"),
        ("migrate", "--check"),
        ("recover", "--dry-run"),
    ]
    if "audit" in _commands():
        reads.append(("audit",))
    for step in reads:
        result = cli(*step, url=reader)
        assert result.code == 0, (step, result.err)
    writes = [
        ("tasks", "add", "mine", "--every", "1h", "--command", "true"),
        ("tasks", "pause", "seen"),
        ("tasks", "trigger", "seen"),
        ("tasks", "delete", "seen"),
        ("config", "set", "max-concurrent-runs", "1"),
        ("recover",),
    ]
    for step in writes:
        result = cli(*step, url=reader)
        assert result.code == 1, (step, result.out)
        assert "permission denied" in result.err, (step, result.err)
    assert _row_counts(fleet.admin_url) == before


def _commands() -> set[str]:
    from scheduler_daemon.cli import cli as root

    return set(root.commands)


def _row_counts(url: str) -> dict[str, int]:
    return {t: query(url, f"SELECT count(*) AS n FROM {t}")[0]["n"] for t in roles.TABLES}


@pytest.mark.parametrize("kind", ["daemon", "operator", "reader"])
def test_no_role_but_the_owner_can_change_the_schema(fleet: Fleet, kind: str) -> None:
    url = fleet.url(getattr(fleet.names, kind))
    for statement in (
        "CREATE TABLE intruder (id int)",
        "ALTER TABLE task ADD COLUMN intruder int",
        "DROP TABLE run",
        "TRUNCATE occurrence",
        "CREATE INDEX intruder ON task (name)",
        "ALTER TABLE task DISABLE TRIGGER task_event_on_change",
        "DELETE FROM task_event",
        "UPDATE fleet_setting_event SET value = '1'",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            query(url, statement)


def test_the_daemon_role_cannot_define_tasks_or_change_the_budget(fleet: Fleet, cli) -> None:
    daemon = fleet.url(fleet.names.daemon)
    for step in (
        ("tasks", "add", "smuggled", "--every", "1h", "--command", "true"),
        ("config", "set", "max-concurrent-runs", "1000"),
    ):
        result = cli(*step, url=daemon)
        assert result.code == 1, (step, result.out)
        assert "permission denied" in result.err, (step, result.err)


def test_the_history_triggers_write_as_the_writer_so_writers_need_insert_on_the_history(
    fleet: Fleet, cli
) -> None:
    """The decision in storage/roles.py: the 0002 triggers run as the role that changed the row.
    Parking a task (the dispatcher's write that the trigger records) works for the daemon role
    with INSERT on task_event, and fails without it."""
    operator, daemon = fleet.url(fleet.names.operator), fleet.url(fleet.names.daemon)
    assert (
        cli("tasks", "add", "parkable", "--every", "1h", "--command", "true", url=operator).code
        == 0
    )
    park = "UPDATE task SET parked_at = now(), park_error = 'unplannable' WHERE name = 'parkable'"
    unpark = "UPDATE task SET parked_at = NULL, park_error = NULL WHERE name = 'parkable'"
    events = (
        "SELECT kind, active FROM task_event e JOIN task t ON t.id = e.task_id "
        "WHERE t.name = 'parkable' ORDER BY e.id"
    )
    query(daemon, park)
    assert query(fleet.admin_url, events) == [
        {"kind": "created", "active": True},
        {"kind": "changed", "active": False},
    ]
    query(fleet.url(fleet.names.owner), f'REVOKE INSERT ON task_event FROM "{fleet.names.daemon}"')
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="task_event"):
            query(daemon, unpark)
    finally:
        regrant = _command(fleet.url(fleet.names.owner), "db", "roles", *_name_options(fleet.names))
        assert regrant.returncode == 0, regrant.stderr
    query(daemon, unpark)
    assert len(query(fleet.admin_url, events)) == 3


def test_the_daemon_role_prunes_history_and_the_others_cannot_delete_it(fleet: Fleet, cli) -> None:
    """The retention's DELETE (storage/roles.py): the daemon deletes finished occurrences and
    their runs past the retention, as its reconcile step and `prune` do; the operator and the
    reader delete no history, and nobody but the owner deletes a task or its definitions."""
    operator, daemon = fleet.url(fleet.names.operator), fleet.url(fleet.names.daemon)
    assert (
        cli("tasks", "add", "pruned", "--every", "1h", "--command", "true", url=operator).code == 0
    )
    for _ in range(2):
        assert cli("tasks", "trigger", "pruned", url=operator).code == 0
    query(
        fleet.admin_url,
        "UPDATE occurrence SET status = 'cancelled', reason = 'test', "
        "finished_at = now() - interval '40 days' "
        "WHERE task_id = (SELECT id FROM task WHERE name = 'pruned')",
    )
    assert cli("config", "set", "history-retention", "30d", url=operator).code == 0
    result = cli("prune", "--json", url=daemon)
    assert result.code == 0, result.err
    assert result.json()["occurrences"] == 1  # the newer one is the task's latest outcome
    # The operator deletes occurrences only to end one it cancels (a move out of the hot set,
    # issue 47: storage/roles.py); no run, and the reader nothing.
    for kind, tables in (("operator", ("run",)), ("reader", ("occurrence", "run"))):
        for table in tables:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                query(fleet.url(getattr(fleet.names, kind)), f"DELETE FROM {table}")
    for table in ("task", "task_event"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            query(daemon, f"DELETE FROM {table}")


def test_the_daemon_role_records_delivers_and_prunes_notifications(fleet: Fleet, cli) -> None:
    """The outbox's grants (storage/roles.py, ADR 0016): the daemon inserts a notification
    beside an outcome, claims and records it (UPDATE of the delivery columns only), and its
    prune deletes it with the occurrence through the cascade, and itself a `deadline` row
    written before its firing had one (revision 0030) once past the retention."""
    from psycopg.rows import dict_row

    from scheduler_daemon.storage import outbox_store

    operator, daemon = fleet.url(fleet.names.operator), fleet.url(fleet.names.daemon)
    added = cli(
        "tasks",
        "add",
        "notified",
        "--every",
        "1h",
        "--command",
        "true",
        "--notify",
        "http://127.0.0.1:9/hook",
        url=operator,
    )
    assert added.code == 0, added.err
    for _ in range(2):
        assert cli("tasks", "trigger", "notified", url=operator).code == 0
    query(
        fleet.admin_url,
        "UPDATE occurrence SET status = 'failed', finished_at = now() - interval '40 days' "
        "WHERE task_id = (SELECT id FROM task WHERE name = 'notified') RETURNING id",
    )
    ids = [
        r["id"]
        for r in query(
            fleet.admin_url,
            "SELECT o.id FROM occurrence o JOIN task t "
            "ON t.id = o.task_id WHERE t.name = 'notified' ORDER BY o.id",
        )
    ]
    with psycopg.connect(daemon, row_factory=dict_row) as conn:
        assert outbox_store.enqueue(conn, ids) == 2
        claimed = outbox_store.claim(conn, lease=timedelta(seconds=15))
        assert claimed is not None
        assert outbox_store.failed(conn, claimed, error="HTTP 500", delay=timedelta(0))
        conn.commit()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE notification_outbox SET payload = '{}'")
    unrecorded = query(
        fleet.admin_url,
        "INSERT INTO notification_outbox (task_id, scheduled_for, event, payload, created_at)"
        " SELECT id, now() - age, 'deadline', '{}', now() - age FROM task,"
        " (VALUES (interval '40 days'), (interval '1 day')) a(age) WHERE name = 'notified'"
        " ORDER BY age DESC RETURNING id",
    )
    assert cli("config", "set", "history-retention", "30d", url=operator).code == 0
    pruned = cli("prune", "--json", url=daemon)
    assert pruned.code == 0, pruned.err
    assert pruned.json()["occurrences"] >= 1
    kept = {r["id"] for r in query(fleet.admin_url, "SELECT id FROM occurrence")}
    left = query(
        fleet.admin_url,
        "SELECT n.occurrence_id FROM notification_outbox n JOIN task t ON t.id = n.task_id "
        "WHERE t.name = 'notified'",
    )
    assert {r["occurrence_id"] for r in left} - {None} == kept & set(ids) != set(ids)
    assert [r["id"] for r in query(fleet.admin_url, UNRECORDED)] == [unrecorded[1]["id"]]


UNRECORDED = "SELECT id FROM notification_outbox WHERE occurrence_id IS NULL ORDER BY id"


# What a job runs, where, with what and when: a daemon role that could change any of these could
# make every replica run a command of its choosing (the column lists of storage/roles.py).
WHAT_A_JOB_RUNS = (
    "name",
    "executor",
    "payload",
    "schedule_kind",
    "cron_expr",
    "every",
    "run_at",
    "anchor_at",
    "timezone",
    "dst_gap",
    "dst_overlap",
    "concurrency_key",
    "overlap",
    "misfire",
    "misfire_grace",
    "catchup_limit",
    "catchup_window",
    "start_deadline",
    "run_timeout",
    "max_attempts",
    "backoff",
    "paused",
    "deleted_at",
    "history_retention",
    "source",
)


def test_the_daemon_role_cannot_update_what_a_job_runs_or_when(fleet: Fleet, cli) -> None:
    """Before the column grants the daemon role held UPDATE on the whole task table: one job
    that read the daemon's credentials could rewrite every task's command."""
    operator, daemon = fleet.url(fleet.names.operator), fleet.url(fleet.names.daemon)
    assert (
        cli("tasks", "add", "guarded", "--every", "1h", "--command", "true", url=operator).code == 0
    )
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        query(
            daemon,
            """UPDATE task SET payload = '{"command": "echo planted"}' WHERE name = 'guarded'""",
        )
    for column in WHAT_A_JOB_RUNS:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            query(daemon, f"UPDATE task SET {column} = {column} WHERE name = 'guarded'")
    # Every other column the daemon does not write is refused too, and what it writes is not.
    writable = set(roles.updated_columns("daemon", "task", roles.widest_window()) or ())
    assert writable.isdisjoint(WHAT_A_JOB_RUNS)
    for column in sorted(_columns(fleet.admin_url, "task") - writable):
        value = "DEFAULT" if column == "id" else column  # an identity column takes no other
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            query(daemon, f"UPDATE task SET {column} = {value} WHERE name = 'guarded'")
    for column in sorted(writable):  # what a daemon writes it still may
        query(daemon, f"UPDATE task SET {column} = {column} WHERE name = 'guarded'")
    (row,) = query(fleet.admin_url, "SELECT payload FROM task WHERE name = 'guarded'")
    assert row["payload"] == {"command": "true"}


# A job that found the daemon's credentials where docs/operators/deploy.md says any job can
# (/proc/PID/environ of the daemon, which runs as the same OS user), and tries to make every
# replica run its own command. It records what happened in a file; its output stays empty.
PLANTER = """
import sys, psycopg
pid, target, out = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    env = open(f"/proc/{pid}/environ", "rb").read().split(b"\\0")
    key = b"SCHEDULER_DATABASE_URL="
    url = next(e[len(key) :].decode() for e in env if e.startswith(key))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE task SET payload = jsonb_build_object('command', 'echo planted') "
            "WHERE name = %s",
            (target,),
        )
    result = "planted"
except psycopg.errors.InsufficientPrivilege as exc:
    result = "denied: " + str(exc).splitlines()[0]
except Exception as exc:
    result = f"failed: {exc!r}"
open(out, "w").write(result)
"""


def test_a_whole_daemon_cycle_runs_as_the_daemon_role_and_its_jobs_cannot_plant_commands(
    fleet: Fleet, cli, tmp_path: Path
) -> None:
    """Two daemons of the daemon role: dispatch, claim, run, complete (success, and a one-shot's
    end), take over a SIGKILLed peer's run and retry it, prune history past the retention, park
    a task they cannot plan; a job that read a daemon's credentials from /proc cannot rewrite a
    task. Fails before the column grants on the last point: the job's UPDATE went through."""
    operator, daemon = fleet.url(fleet.names.operator), fleet.url(fleet.names.daemon)
    admin = fleet.admin_url
    marker = tmp_path / "victim-ran"

    def add(name: str, *args: str) -> None:
        result = cli("tasks", "add", name, *args, url=operator)
        assert result.code == 0, (name, result.err)

    def task(name: str) -> dict:
        return query(admin, "SELECT * FROM task WHERE name = %s AND deleted_at IS NULL", (name,))[0]

    def newest(name: str) -> str | None:
        """A recurring task's newest outcome, read from its occurrences (revision 0021)."""
        rows = query(
            admin,
            "SELECT o.status FROM occurrence o JOIN task t ON t.id = o.task_id "
            "WHERE t.name = %s AND t.deleted_at IS NULL AND o.finished_at IS NOT NULL "
            "AND o.status <> 'skipped' ORDER BY o.occurrence_seq DESC LIMIT 1",
            (name,),
        )
        return rows[0]["status"] if rows else None

    add("cycle-tick", "--every", "1s", "--command", "true")
    # Far enough ahead for the CLI to start under a loaded machine: `--at` in the past is refused.
    soon = datetime.now(UTC) + timedelta(seconds=5)
    add("cycle-once", "--at", soon.isoformat(), "--command", "true")
    add(
        "cycle-victim",
        "--every",
        "1h",
        "--max-attempts",
        "2",
        "--backoff",
        "0s",
        "--command",
        f"if [ -e {marker} ]; then exit 0; fi; touch {marker}; sleep 4246.125",
    )
    add("cycle-parked", "--cron", "0 0 * * *", "--command", "true")
    add("cycle-pruned", "--every", "1h", "--command", "true")
    for _ in range(2):
        assert cli("tasks", "trigger", "cycle-pruned", url=operator).code == 0
    started = [DaemonProcess(daemon, tmp_path, f"cycle-{n}") for n in ("a", "b")]
    try:
        ids = [d.instance_id() for d in started]
        # The planter runs on a replica with the first daemon's pid to read.
        planted = tmp_path / "planted"
        script = tmp_path / "planter.py"
        script.write_text(PLANTER)
        add(
            "cycle-planter",
            "--every",
            "1h",
            "--command",
            f"{sys.executable} {script} {started[0].pid} cycle-tick {planted} >/dev/null 2>&1",
        )
        assert cli("tasks", "trigger", "cycle-planter", url=operator).code == 0
        # Dispatch, claim, run, complete.
        wait_for(
            lambda: (
                newest("cycle-tick") == "success" and task("cycle-once")["status"] == "completed"
            ),
            message="the interval task and the one-shot to succeed",
        )
        # The planter ran while the daemon whose environment it read was alive.
        wait_for(lambda: planted.exists() and planted.read_text(), message="the planter to run")
        # Take over: SIGKILL the daemon running the victim; the other ends and retries it.
        assert cli("tasks", "trigger", "cycle-victim", url=operator).code == 0
        (running,) = wait_for(
            lambda: query(
                admin,
                "SELECT r.id, r.owner FROM run r JOIN occurrence o ON o.id = r.occurrence_id "
                "JOIN task t ON t.id = o.task_id "
                "WHERE t.name = 'cycle-victim' AND r.status = 'running'",
            ),
            message="the victim to run",
        )
        wait_for(lambda: processes_matching("sleep 4246.125"), message="the victim's job")
        dying = started[ids.index(running["owner"])]
        survivor = ids[1 - ids.index(running["owner"])]
        os.kill(dying.pid, signal.SIGKILL)
        dying.proc.wait(10)
        wait_for(
            lambda: newest("cycle-victim") == "success",
            timeout=30,
            message="the victim's retry to succeed after the takeover",
        )
        (first,) = query(
            admin, "SELECT status, finished_by FROM run WHERE id = %s", (running["id"],)
        )
        assert (first["status"], first["finished_by"]) == ("interrupted", survivor)
        # Prune: the older of two finished occurrences past the retention goes.
        query(
            admin,
            "UPDATE occurrence SET status = 'cancelled', reason = 'test', "
            "finished_at = now() - interval '40 days' "
            "WHERE task_id = (SELECT id FROM task WHERE name = 'cycle-pruned')",
        )
        assert cli("config", "set", "history-retention", "30d", url=operator).code == 0
        wait_for(
            lambda: (
                query(
                    admin,
                    "SELECT count(*) AS n FROM occurrence "
                    "WHERE task_id = (SELECT id FROM task WHERE name = 'cycle-pruned')",
                )[0]["n"]
                == 1
            ),
            message="the reconcile step to prune the older occurrence",
        )
        # Park: a cron expression written by hand that no build can plan, due now.
        query(
            admin,
            "UPDATE task SET cron_expr = '61 * * * *', next_run_at = now() "
            "WHERE name = 'cycle-parked'",
        )
        wait_for(
            lambda: task("cycle-parked")["parked_at"] is not None,
            message="the dispatcher to park the task",
        )
    finally:
        codes = [p.stop() for p in started if p.proc.poll() is None]
    assert planted.read_text().startswith("denied: permission denied for table task"), (
        planted.read_text()
    )
    assert task("cycle-tick")["payload"] == {"command": "true"}
    assert codes == [0]  # the survivor drained; the other was SIGKILLed
    for process in started:
        assert "permission denied" not in process.log(), process.log()[-6000:]


def test_the_reader_follows_a_run_unmarked_and_sees_its_output_when_it_ends(
    fleet: Fleet, cli
) -> None:
    """`runs logs -f` marks a run followed (an UPDATE): the reader may not, so it says so once,
    marks nothing, and prints the output when the run ends."""
    operator = fleet.url(fleet.names.operator)
    assert (
        cli("tasks", "add", "tail-me", "--every", "1h", "--command", "true", url=operator).code == 0
    )
    (run,) = query(
        fleet.admin_url,
        "WITH o AS (INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, "
        "overlap, status, not_before, lease_token, attempts) SELECT id, 1, now(), 'manual', "
        "'forbid', 'running', now(), 1, 1 FROM task WHERE name = 'tail-me' RETURNING id) "
        "INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at, "
        "takeover_at, status, build_revision) SELECT id, 1, 'someone', 1, now() + '1 h', "
        "now() + '1 h', 'running', '0023' FROM o RETURNING id, occurrence_id",
    )
    follower = subprocess.Popen(
        [sys.executable, "-m", "scheduler_daemon", "runs", "logs", "-f", str(run["id"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SCHEDULER_DATABASE_URL": fleet.url(fleet.names.reader)},
    )
    assert follower.stderr is not None
    assert follower.stderr.readline().startswith(f"this role may not mark run {run['id']} followed")
    (row,) = query(fleet.admin_url, "SELECT followed_at FROM run WHERE id = %s", (run["id"],))
    assert row["followed_at"] is None
    query(
        fleet.admin_url,
        "WITH r AS (UPDATE run SET status = 'success', finished_at = now(), output_tail = "
        "'done\n' WHERE id = %(run)s RETURNING id) UPDATE occurrence SET status = 'success', "
        "finished_at = now() WHERE id = %(occurrence)s RETURNING id",
        {"run": run["id"], "occurrence": run["occurrence_id"]},
    )
    assert follower.wait(30) == 0
    assert follower.stdout is not None
    # through the readers: the one of stderr may have buffered past the line read above
    assert (follower.stdout.read(), follower.stderr.read()) == ("done\n", "")


def test_the_owners_migrate_puts_a_changed_function_back_with_its_privileges(
    fleet: Fleet,
) -> None:
    """`migrate` runs as the schema owner, no superuser: it re-creates and records the functions
    it owns (ADR 0028). Catches a file that, re-created, would leave sd_end_pause_v1 with the
    search path it was given by hand, or executable by a role `db roles` left out."""
    end_pause = "sd_end_pause_v1(bigint, timestamptz, text, text)"
    query(fleet.admin_url, f"ALTER FUNCTION {end_pause} SET search_path = public")
    migrated = _command(fleet.url(fleet.names.owner), "migrate", "--json")
    assert migrated.returncode == 0, migrated.stderr
    assert '"end_pause.sql"' in migrated.stdout
    (row,) = query(
        fleet.admin_url,
        "SELECT proconfig, has_function_privilege(%(daemon)s, oid, 'EXECUTE') AS daemon, "
        "has_function_privilege(%(operator)s, oid, 'EXECUTE') AS operator, "
        "(SELECT count(*) FROM pg_proc p WHERE obj_description(p.oid, 'pg_proc') "
        " LIKE 'from sql/functions/%%') AS recorded "
        f"FROM pg_proc WHERE oid = '{end_pause}'::regprocedure",
        {"daemon": fleet.names.daemon, "operator": fleet.names.operator},
    )
    assert row["proconfig"] == ["search_path=public, pg_temp"]
    recorded = len(functions.files())  # every file's function, recorded
    assert (row["daemon"], row["operator"], row["recorded"]) == (True, False, recorded)
