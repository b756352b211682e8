"""The console's audit page (issue 44, item 4): it runs on the console's own Client, one at a
time. A flood of `GET /audit` opened a connection pool per request on the database URL (25-32
connections of the reader role, and a daemon starting meanwhile found no slot); now a request
while one audit runs is refused at once with 429, and the server sees no connection beyond the
console's one."""

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from scheduler_daemon.client import Client
from scheduler_daemon.console.app import build_app
from scheduler_daemon.console.guard import Guard
from tests.console_process import BASE, message
from tests.support import wait_for


@pytest.fixture
def http(database_url: str) -> Iterator[TestClient]:
    """A read-only console over its own Client."""
    client = Client(database_url)
    guard = Guard(writes=False, token=None, trust_header=None)
    with TestClient(build_app(client, guard), base_url=BASE) as web:
        yield web
    client.close()


def _connections(db: psycopg.Connection[Any]) -> int:
    """Sessions on the test database other than this one and the lock holder's."""
    return db.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND application_name <> 'lock holder'"
    ).fetchone()["n"]


def _waiting_on_a_lock(db: psycopg.Connection[Any]) -> bool:
    return bool(
        db.execute(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        ).fetchone()
    )


def test_an_audit_asked_for_while_one_runs_is_refused_with_429_and_opens_no_connection(
    http: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """Catches the per-request pool: on the old code the second request opened a pool of its
    own and waited behind the held lock with the first (no 429), and the first request's
    pool showed as one more server connection than the console's."""
    assert http.get("/").status_code == 200  # the console's one connection is open
    before = _connections(db)
    responses: dict[str, Any] = {}

    def ask(name: str) -> None:
        responses[name] = http.get("/audit?since=15m")

    # A session holding the occurrence table stops the first audit at its first check (its
    # lock_timeout is 5 s), long enough to ask again beside it.
    with psycopg.connect(database_url, application_name="lock holder") as holder:
        holder.execute("LOCK TABLE occurrence IN ACCESS EXCLUSIVE MODE")
        first = threading.Thread(target=ask, args=("first",))
        first.start()
        wait_for(lambda: _waiting_on_a_lock(db), timeout=4, message="the first audit to wait")
        during = _connections(db)
        second = threading.Thread(target=ask, args=("second",))
        second.start()
        second.join(timeout=2)
        assert not second.is_alive(), "the second audit waited instead of being refused"
        assert "first" not in responses  # still held by the lock
        holder.rollback()
    first.join(timeout=10)
    assert responses["first"].status_code == 200, responses["first"].text
    assert "audit: no violations" in responses["first"].text
    assert responses["second"].status_code == 429
    assert message(responses["second"].text) == (
        "error: an audit is running already; try again when it has finished"
    )
    assert during == before  # the audit ran on the console's connection
    again = http.get("/audit?since=1h")  # the refusal left the way free
    assert again.status_code == 200, again.text
    assert _connections(db) == before
