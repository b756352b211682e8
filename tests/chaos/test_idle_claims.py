"""An idle daemon sends no claims (issue 33 item 3). On a poll alone every daemon of a fleet took
the fleet budget's lock to claim nothing: 50 idle daemons sent 49 claims/s, serialized on that
lock (bench/fleet_size.py). It claims after a wake-up, a dispatch that queued work, or a dispatch
(at least once a poll interval) that finds a queued occurrence that may start: a retry whose
backoff ended, or work no wake-up announced. On the build before it this test fails: the idle
daemon's `claims_total` grows by one a poll (200 ms here)."""

import time
from pathlib import Path

import pytest

from tests.chaos.test_endpoint import scrape, value
from tests.support import free_port, http_get, query, wait_for

pytestmark = pytest.mark.slow
CLAIMS = "scheduler_daemon_claims_total"


def test_an_idle_daemon_sends_no_claims_and_a_silent_queued_firing_still_starts(
    spawn, cli, database_url: str, tmp_path: Path
) -> None:
    assert cli("tasks", "add", "quiet", "--every", "1h", "--command", "true", "--paused").code == 0
    port = free_port()
    daemon = spawn(database_url, "idle", "--http-port", str(port))  # FAST: a 200 ms poll
    daemon.instance_id()
    wait_for(lambda: http_get(port, "/readyz") == (200, "ready\n"), message="ready")
    time.sleep(1.0)  # its first passes: a fresh loop claims once
    before = value(scrape(port), CLAIMS)
    time.sleep(3.0)  # fifteen polls, nothing queued
    assert value(scrape(port), CLAIMS) == before

    # Queued with no wake-up (as a retry whose backoff ends is): the next dispatch sees it.
    query(
        database_url,
        "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, "
        "status, not_before) SELECT id, 1, now(), 'manual', 'allow', 'queued', now() "
        "FROM task WHERE name = 'quiet' RETURNING id",
    )
    wait_for(
        lambda: query(database_url, "SELECT 1 FROM run WHERE status = 'success'"),
        timeout=10,
        message="the silently queued firing to run",
    )
    assert value(scrape(port), CLAIMS) > before
