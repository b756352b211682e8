"""A session outside the fleet that holds the fleet budget's advisory lock (issue 29): a role of
its own with no privilege at all, since `pg_advisory_xact_lock` asks for none."""

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from scheduler_daemon.storage.fleet_store import BUDGET_LOCK_KEY

APPLICATION = "outside the fleet"


def as_role(url: str, role: str) -> str:
    """`url` logging in as `role` (the test server trusts local connections)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


@contextmanager
def unprivileged_role(url: str) -> Iterator[str]:
    """A new login role granted nothing (PUBLIC's CONNECT only), dropped afterwards."""
    role = f"sd_outsider_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
    try:
        yield role
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP ROLE IF EXISTS {role}")


@dataclass
class Holder:
    conn: psycopg.Connection[Any]
    pid: int
    role: str

    def release(self) -> None:
        """Ends its transaction, and with it the lock."""
        self.conn.rollback()


@contextmanager
def outside_holder(url: str) -> Iterator[Holder]:
    """A session of an unprivileged role holding the budget's lock in an open transaction until
    `release()` or the end of the block."""
    with unprivileged_role(url) as role:
        conn = psycopg.connect(as_role(url, role), application_name=APPLICATION)
        try:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (BUDGET_LOCK_KEY,))
            yield Holder(conn, conn.info.backend_pid, role)
        finally:
            conn.close()
