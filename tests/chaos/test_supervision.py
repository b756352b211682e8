"""A real daemon whose passes keep failing gives up with exit code 3, after draining; a database
outage, however long, never makes it give up. One whose lease keeper keeps failing, or whose
keeper's thread dies, stops its jobs without writing and exits 7; a dead waker is restarted with
back-off while the loop polls (ADR 0005)."""

import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from scheduler_daemon.runtime.supervision import EXIT_FAILED_PASSES, EXIT_LEASE_KEEPER_FAILED
from scheduler_daemon.storage import migration
from tests.support import OUTAGE_STEPS_TIMEOUT, processes_matching, query, wait_for

pytestmark = pytest.mark.slow


def test_a_loop_that_keeps_failing_drains_and_exits_3_but_an_outage_does_not_count(
    spawn, owned_server, cli, tmp_path: Path
) -> None:
    owned_server.start()
    url = owned_server.url
    migration.upgrade(url)
    never = tmp_path / "never"
    hold = f"while [ ! -e {never} ]; do sleep 0.05; done"
    cli("tasks", "add", "held", "--every", "1h", "--command", hold, url=url)
    daemon = spawn(url, "failing", "--max-failed-passes", "2")
    instance_id = daemon.instance_id()

    owned_server.stop()  # an outage: more failed passes than the limit, and it stays
    wait_for(
        lambda: daemon.log().count('"pass_failed"') >= 3,
        timeout=OUTAGE_STEPS_TIMEOUT,
        message="passes to fail while the database is down",
    )
    assert daemon.proc.poll() is None
    owned_server.start()
    cli("tasks", "trigger", "held", url=url)
    wait_for(lambda: query(url, "SELECT 1 FROM run WHERE status = 'running'"), message="the job")

    # A broken SQL object: admission's budget query now fails on every pass.
    query(url, "ALTER TABLE fleet_setting RENAME TO fleet_setting_gone")
    assert daemon.proc.wait(60) == EXIT_FAILED_PASSES, daemon.log()

    log = daemon.log()
    assert log.count('"pass_crashed"') >= 2
    (giving_up,) = [line for line in log.splitlines() if '"loop_failing"' in line]
    assert 'relation \\"fleet_setting\\" does not exist' in giving_up
    assert '"exit_code": 3' in giving_up
    # It drained like a SIGTERM: the held job was stopped and recorded, the instance removed.
    assert query(url, "SELECT status FROM run") == [{"status": "interrupted"}]
    assert query(url, "SELECT 1 FROM instance WHERE id = %s", (instance_id,)) == []


# -- the side threads (ADR 0005) ------------------------------------------------------------------
# A real process cannot be reached from here to kill one of its threads, so these tests load an
# injection at interpreter start (a sitecustomize module on PYTHONPATH) that makes one method of a
# service raise a BaseException, which no `except Exception` of the service catches: its thread
# dies as it would from a bug in its loop (or a MemoryError, a SystemExit in a callee).
INJECTION = """
import importlib.abc
import importlib.util
import os
import sys


class InjectedDeath(BaseException):
    pass


def keeper(module):
    renew = module.LeaseKeeper.run_once

    def run_once(self):
        if self.held.leases():  # once it holds a run: the daemon must not keep it running
            raise InjectedDeath("injected: the lease keeper's thread dies")
        return renew(self)

    module.LeaseKeeper.run_once = run_once


def waker(module):
    listen = module.Waker._listen
    deaths = [int(os.environ["INJECT_WAKER_DEATHS"])]

    def _listen(self, conn):
        if deaths[0] > 0:
            deaths[0] -= 1
            raise InjectedDeath("injected: the waker's thread dies")
        return listen(self, conn)

    module.Waker._listen = _listen


PATCHES = {}
if os.environ.get("INJECT_KEEPER_DEATH"):
    PATCHES["scheduler_daemon.services.lease_keeper"] = keeper
if os.environ.get("INJECT_WAKER_DEATHS"):
    PATCHES["scheduler_daemon.services.waker"] = waker


class Patcher(importlib.abc.MetaPathFinder):
    # Patches each module as the daemon imports it. Importing it here instead, before `-m` puts
    # the working directory on sys.path, could load another checkout's package (the editable
    # install's) than the one under test.
    def find_spec(self, name, path, target=None):
        if name not in PATCHES:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            PATCHES[name](module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, Patcher())
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _injection(tmp_path: Path, **env: str) -> dict[str, str]:
    site = tmp_path / "inject"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(INJECTION)
    return {"PYTHONPATH": str(site), **env}


def _held_job(cli, url: str, tmp_path: Path) -> tuple[Path, str]:
    """A task whose job runs until a file that never appears exists; triggered once."""
    never = tmp_path / "never"
    cli(
        "tasks",
        "add",
        "held",
        "--every",
        "1h",
        "--command",
        f"until [ -e {never} ]; do sleep 0.05; done",
        url=url,
    )
    cli("tasks", "trigger", "held", url=url)
    return never, str(never)


def _abandoned(daemon, url: str, marker: str) -> dict:
    """After the daemon exited 7: its job is gone, and its run was left as it was (nothing
    written with a lease the keeper could not vouch for): still running at its token."""
    assert daemon.proc.wait(60) == EXIT_LEASE_KEEPER_FAILED, daemon.log()
    assert processes_matching(marker) == [], "the job outlived its daemon"
    (run,) = query(url, "SELECT id, status, lease_token, finished_at FROM run")
    assert run["status"] == "running"
    assert run["finished_at"] is None
    (occurrence,) = query(url, "SELECT status FROM occurrence")
    assert occurrence["status"] == "running"
    return run


def test_a_lease_keeper_whose_renewal_keeps_failing_stops_its_jobs_and_exits_7(
    spawn, database_url, cli, tmp_path: Path
) -> None:
    url = database_url
    # Renewals every 4 s; a job's trust deadline 9.6 s after the last good renewal was sent, so
    # the keeper's two failed passes (at 4 s and 8 s) end the daemon before the watchdog would.
    daemon = spawn(url, "keeper", "--max-failed-passes", "2", "--lease-ttl", "12s")
    daemon.instance_id()
    _, marker = _held_job(cli, url, tmp_path)
    (before,) = wait_for(
        lambda: query(url, "SELECT id, lease_token FROM run WHERE status = 'running'"),
        message="the job to run",
    )
    wait_for(lambda: processes_matching(marker), message="the job's process")
    # Every heartbeat (the keeper's pass writes it with the renewal) now fails: not an outage, a
    # lock or a read-only error, but what a dropped column or a revoked privilege looks like. The
    # loop itself never updates an instance row, so only the keeper meets it.
    query(
        url,
        "CREATE FUNCTION injected_failure() RETURNS trigger LANGUAGE plpgsql AS "
        "$$BEGIN RAISE EXCEPTION 'injected: the heartbeat is broken'; END$$",
    )
    query(
        url,
        "CREATE TRIGGER injected_failure BEFORE UPDATE ON instance "
        "FOR EACH ROW EXECUTE FUNCTION injected_failure()",
    )
    run = _abandoned(daemon, url, marker)
    assert run["lease_token"] == before["lease_token"]
    log = daemon.log()
    assert log.count('"lease_keeper_error"') == 2
    (failed,) = [line for line in log.splitlines() if '"lease_keeper_failed"' in line]
    assert "failed 2 passes in a row: injected: the heartbeat is broken" in failed
    assert '"run_abandoned_lease_keeper_failed"' in log
    assert '"drain_started"' not in log  # no drain: nothing was written
    # The run is the takeover's: a peer's reconciliation (here `recover --wait`) re-queues it.
    taken = cli("recover", "--wait", "--lease-ttl", "12s", url=url)
    assert taken.code == 0, taken.err
    assert query(url, "SELECT status FROM run") == [{"status": "interrupted"}]


def test_a_lease_keeper_whose_thread_dies_stops_its_jobs_and_exits_7(
    spawn, database_url, cli, tmp_path: Path
) -> None:
    url = database_url
    env = _injection(tmp_path, INJECT_KEEPER_DEATH="1")
    daemon = spawn(url, "dead-keeper", "--max-failed-passes", "10", env=env)
    daemon.instance_id()
    _, marker = _held_job(cli, url, tmp_path)
    _abandoned(daemon, url, marker)
    log = daemon.log()
    assert '"lease_keeper_died"' in log
    (failed,) = [line for line in log.splitlines() if '"lease_keeper_failed"' in line]
    assert "its thread died" in failed
    assert "InjectedDeath" in failed
    assert '"exit_code": 7' in failed


def test_a_waker_whose_thread_dies_is_restarted_and_the_daemon_polls_meanwhile(
    spawn, database_url, cli, tmp_path: Path
) -> None:
    url = database_url
    env = _injection(tmp_path, INJECT_WAKER_DEATHS="3")  # restarted after 1 s, 2 s, 4 s
    port = _free_port()
    daemon = spawn(url, "dead-waker", "--http-port", str(port), env=env)
    daemon.instance_id()
    wait_for(lambda: '"side_thread_died"' in daemon.log(), message="the waker to die")
    # Still ready (a daemon takes no inbound traffic; readiness gates rollouts), but /readyz
    # names what is down.
    wait_for(
        lambda: _get(port, "/readyz")[1].startswith("ready (degraded: waker down"),
        message="/readyz to name the dead waker",
    )
    assert _get(port, "/readyz")[0] == 200
    # While its waker is dead the daemon still takes work: its loop polls.
    cli("tasks", "add", "now", "--every", "1h", "--command", "true", url=url)
    cli("tasks", "trigger", "now", url=url)
    wait_for(
        lambda: query(url, "SELECT 1 FROM run WHERE status = 'success'"),
        message="the triggered job to succeed while the waker is down",
    )
    wait_for(
        lambda: daemon.log().count('"side_thread_restarted"') >= 3,
        timeout=30,
        message="the waker to be restarted three times, with back-off",
    )
    log = daemon.log()
    assert daemon.proc.poll() is None, log
    # Each death is counted; the line that says so comes at most once a minute.
    assert log.count('"side_thread_died"') == 1
    metrics = _get(port, "/metrics")[1]
    assert 'scheduler_daemon_side_failures_total{part="waker"} 3.0' in metrics
    assert _get(port, "/readyz") == (200, "ready\n")
    assert daemon.stop() == 0, daemon.log()
