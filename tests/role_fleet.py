"""The four roles of `scheduler-daemon db roles --create`, made for one test under names of its
own (roles are cluster-wide) and dropped afterwards, so a test can run its daemons as the daemon
role and its CLI writes as the operator role: a grant the code needs and `db roles` lacks then
fails the test with `permission denied` instead of passing as a superuser."""

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from scheduler_daemon.storage.roles import RoleNames


def as_role(url: str, role: str, password: str) -> str:
    """`url` with `role` and its password in place of the user it names."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role}:{quote(password)}@{host}"))


def name_options(names: RoleNames) -> list[str]:
    """`db roles` options that name the four roles."""
    return [
        *("--owner", names.owner),
        *("--daemon", names.daemon),
        *("--operator", names.operator),
        *("--reader", names.reader),
    ]


def command(
    url: str, *args: str, python: str = sys.executable, cwd: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The real entry point in a process of its own (`python`: another build's)."""
    return subprocess.run(
        [python, "-m", "scheduler_daemon", "--database-url", url, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
        env={**os.environ, "SCHEDULER_LOG_LEVEL": "warning"},
    )


@dataclass(frozen=True)
class RoleFleet:
    names: RoleNames
    admin_url: str  # the superuser's URL of the test database
    password: str

    def url(self, role: str) -> str:
        return as_role(self.admin_url, role, self.password)

    @property
    def owner(self) -> str:
        return self.url(self.names.owner)

    @property
    def daemon(self) -> str:
        return self.url(self.names.daemon)

    @property
    def operator(self) -> str:
        return self.url(self.names.operator)

    @property
    def reader(self) -> str:
        return self.url(self.names.reader)

    def grant(self, url: str | None = None, **kw: str) -> None:
        """`db roles` (the table privileges), by the superuser unless `url` says who."""
        granted = command(url or self.admin_url, "db", "roles", *name_options(self.names), **kw)
        assert granted.returncode == 0, granted.stderr
        assert granted.stdout.startswith("granted privileges to"), granted.stdout


@contextmanager
def role_fleet(admin_url: str, *, grant: bool = True) -> Iterator[RoleFleet]:
    """Roles made by `db roles --create` in the database of `admin_url` (a superuser's), with a
    password; with `grant`, the table privileges too (on a migrated database). Dropped on exit,
    their sessions ended first."""
    tag = uuid.uuid4().hex[:8]
    names = RoleNames(*(f"sdt_{tag}_{kind}" for kind in ("owner", "daemon", "op", "reader")))
    fleet = RoleFleet(names, admin_url, uuid.uuid4().hex)
    try:
        created = command(admin_url, "db", "roles", "--create", *name_options(names))
        assert created.returncode == 0, created.stderr
        with psycopg.connect(admin_url, autocommit=True) as conn:
            for name in names.all():
                conn.execute(
                    sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                        sql.Identifier(name), sql.Literal(fleet.password)
                    )
                )
        if grant:
            fleet.grant()
        yield fleet
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY(%s)",
                (names.all(),),
            )
            for name in names.all():
                if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
                    conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
                    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))
