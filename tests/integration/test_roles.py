"""The four database roles of `scheduler-daemon db roles`, applied to a database of their own with
names unique to this run (roles are cluster-wide, and dropped afterwards): each role holds exactly
its privileges, the operator and a real daemon process do their work with theirs, the reader
reads everything and writes nothing, and neither the daemon nor the operator can change the
schema."""

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest

from scheduler_daemon.storage import roles
from tests.conftest import with_database
from tests.support import DaemonProcess, query, wait_for

pytestmark = pytest.mark.slow
PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")


@dataclass(frozen=True)
class Fleet:
    names: roles.RoleNames
    url: Callable[[str], str]  # role name → URL of the fleet's database as that role
    admin_url: str


def _as_role(url: str, role: str, password: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role}:{quote(password)}@{host}"))


def _command(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The real entry point in a process of its own, as an administrator would run it."""
    return subprocess.run(
        [sys.executable, "-m", "scheduler_daemon", "--database-url", url, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "SCHEDULER_LOG_LEVEL": "warning"},
    )


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


def _name_options(names: roles.RoleNames) -> list[str]:
    return [
        *("--owner", names.owner),
        *("--daemon", names.daemon),
        *("--operator", names.operator),
        *("--reader", names.reader),
    ]


def _held(url: str, role: str) -> set[tuple[str, str]]:
    """(table, privilege) pairs `role` holds on the schema's tables."""
    rows = query(
        url,
        """
        SELECT t.table_name AS t, p AS privilege FROM information_schema.tables t,
            unnest(%(privileges)s::text[]) AS p
        WHERE t.table_schema = 'public'
          AND has_table_privilege(%(role)s, format('public.%%I', t.table_name), p)""",
        {"privileges": list(PRIVILEGES), "role": role},
    )
    return {(r["t"], r["privilege"]) for r in rows}


def test_the_grants_name_every_table_of_the_schema(fleet: Fleet) -> None:
    rows = query(
        fleet.admin_url,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'",
    )
    assert {r["table_name"] for r in rows} == set(roles.TABLES)


def test_each_role_holds_exactly_what_its_commands_need(fleet: Fleet) -> None:
    names = fleet.names
    everything = {(t, p) for t in roles.TABLES for p in PRIVILEGES}
    assert _held(fleet.admin_url, names.owner) == everything  # it owns them
    for kind in ("daemon", "operator", "reader"):
        expected = {(t, "SELECT") for t in roles.TABLES} | {
            (t, p) for t, ps in roles.WRITES[kind].items() for p in ps
        }
        assert _held(fleet.admin_url, getattr(names, kind)) == expected, kind


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
    assert refused.stderr.startswith("error: database error: permission denied")


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
    query(
        fleet.admin_url, "UPDATE task SET last_outcome_seq = occurrence_seq WHERE name = 'pruned'"
    )
    assert cli("config", "set", "history-retention", "30d", url=operator).code == 0
    result = cli("prune", "--json", url=daemon)
    assert result.code == 0, result.err
    assert result.json()["occurrences"] == 1  # the newer one is the task's latest outcome
    for kind in ("operator", "reader"):
        for table in ("occurrence", "run"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                query(fleet.url(getattr(fleet.names, kind)), f"DELETE FROM {table}")
    for table in ("task", "task_event"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            query(daemon, f"DELETE FROM {table}")
