"""Tests that run on a PostgreSQL server started a moment before (issue 44, item 5): the
README's first test run on a fresh embedded server failed the audit's takeover test 4 times of
4, since the audit skips a quiet period counted from the server's start
(`pg_postmaster_start_time()`, ADR 0007) and the test assumed the server was older. Here a
server of the test's own is started and migrated, and the scenario runs on it at once, so this
class of failure shows in CI where the shared server is hours old."""

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from scheduler_daemon.client import Client
from scheduler_daemon.storage import migration
from scheduler_daemon.storage.database import make_pool
from tests.integration.test_audit import takeover_overdue_scenario
from tests.integration.test_reconciler import recover_scenario
from tests.support import query

# The audit's quiet period after a start with the scenario's instances (TTL 3 s + grace 1 s),
# plus their reconcile interval (1 s) and the audit's slack (10 s).
AUDIT_QUIET = timedelta(seconds=15)


@pytest.fixture
def fresh(owned_server: Any) -> Iterator[tuple[str, Any, Any]]:
    """(url, client, pool) on a server of this test's own, started and migrated just now."""
    owned_server.start()
    url = owned_server.url
    migration.upgrade(url)
    (age,) = query(url, "SELECT now() - pg_postmaster_start_time() AS up")
    assert age["up"] < AUDIT_QUIET, "the server is not fresh: this test would prove nothing"
    pool = make_pool(url, max_size=4, name="fresh-server test")
    pool.open(wait=True)
    try:
        with Client(url) as client:
            yield url, client, pool
    finally:
        pool.close()


def test_the_takeover_audit_holds_on_a_server_started_seconds_ago(fresh) -> None:
    """Fails with the scenario as it was (the database clock, unpinned): on this server the
    run is still inside the quiet period, so no violation is reported."""
    url, client, pool = fresh
    takeover_overdue_scenario(url, client, pool)


def test_recover_takes_over_a_dead_owners_run_on_a_server_started_seconds_ago(
    fresh, cli, executors
) -> None:
    """Fails with the scenario as it was (no wait): `recover`'s default quiet period (12 s
    from the server's start) had not ended, and it took nothing over."""
    url, client, pool = fresh
    recover_scenario(cli, client, pool, executors, url)
