"""A real daemon with work, and a session of a role with no privilege holding the fleet budget's
advisory lock (issue 29): nothing starts, and the daemon says who stops it (its log and
/metrics), `status` names the holder, and the work runs once the holder lets go."""

import json
import re

import pytest

from tests.lock_holder import APPLICATION, outside_holder
from tests.support import free_port, http_get, query, wait_for

pytestmark = pytest.mark.slow


def _metric(port: int, name: str) -> float | None:
    status, body = http_get(port, "/metrics")
    found = re.search(rf"^{name} (\S+)$", body, re.M) if status == 200 else None
    return float(found.group(1)) if found else None


def _events(log: str, event: str) -> list[dict]:
    lines = (line for line in log.splitlines() if f'"{event}"' in line)
    return [e for e in map(json.loads, lines) if e.get("event") == event]


def test_a_daemon_blocked_by_an_outside_holder_names_it_and_runs_the_work_once_released(
    spawn, cli, database_url
) -> None:
    port = free_port()
    daemon = spawn(database_url, "blocked", "--http-port", str(port))
    instance_id = daemon.instance_id()
    assert cli("tasks", "add", "job", "--every", "1h", "--command", "true").code == 0
    with outside_holder(database_url) as holder:
        assert cli("tasks", "trigger", "job").code == 0
        (held,) = wait_for(
            lambda: _events(daemon.log(), "budget_lock_held"),
            message="the daemon to name the holder of the budget lock",
        )
        assert held["holder_pid"] == holder.pid
        assert held["holder_role"] == holder.role
        assert held["holder_application_name"] == APPLICATION
        assert held["instance_id"] == instance_id
        assert held["level"] == "warning"
        wait_for(
            lambda: (_metric(port, "scheduler_daemon_budget_lock_blocked_seconds") or 0) >= 5,
            message="the blocked-seconds gauge to grow",
        )
        assert (_metric(port, "scheduler_daemon_budget_lock_timeouts_total") or 0) >= 1
        (shown,) = cli("status", "--json").json()["budget_lock_holders"]
        assert (shown["pid"], shown["role"]) == (holder.pid, holder.role)
        assert query(database_url, "SELECT 1 FROM run") == []  # nothing started meanwhile
        holder.release()
        wait_for(
            lambda: query(database_url, "SELECT 1 FROM run WHERE status = 'success'"),
            message="the job to run once the holder let go",
        )
    wait_for(
        lambda: _metric(port, "scheduler_daemon_budget_lock_blocked_seconds") == 0,
        message="the gauge to fall back to 0",
    )
    log = daemon.log()
    assert len(_events(log, "budget_lock_held")) == 1  # one line a minute at most
    assert _events(log, "budget_lock_released")
    assert '"pass_failed"' not in log  # a blocked claim is not a failed pass
    assert cli("status", "--json").json()["budget_lock_holders"] == []
    assert daemon.stop() == 0, daemon.log()
