"""Real daemon processes dying, freezing and surviving a database restart; the verdict comes
from the run history and from the job processes themselves."""

import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support import processes_matching, query, snapshot, wait_for

pytestmark = pytest.mark.slow
TTL, GRACE, RECONCILE = 3.0, 1.0, 1.0  # tests.support.FAST


def _add(cli, name: str, command: str, url: str | None = None) -> None:
    args = ("tasks", "add", name, "--every", "1h", "--command", command)
    result = cli(*args) if url is None else cli(*args, url=url)
    assert result.code == 0, result.err


def _second_attempt_succeeds(marker: Path, sleep: str) -> str:
    """A job whose first attempt runs long and whose next one finishes at once."""
    return f"if [ -e {marker} ]; then exit 0; fi; touch {marker}; sleep {sleep}"


def test_a_sigkilled_daemons_run_is_taken_over_within_the_bound_and_retried_to_success(
    spawn, cli, database_url, tmp_path
) -> None:
    _add(cli, "victim", _second_attempt_succeeds(tmp_path / "ran", "4244.125"))
    dying = spawn(database_url, "dying")
    dying_id = dying.instance_id()
    cli("tasks", "trigger", "victim")
    wait_for(lambda: query(database_url, "SELECT 1 FROM run WHERE status = 'running'"))
    rescuer = spawn(database_url, "rescuer")
    rescuer_id = rescuer.instance_id()
    dying.proc.kill()
    killed_at = datetime.now(UTC)
    wait_for(
        lambda: query(database_url, "SELECT 1 FROM occurrence WHERE status = 'success'"),
        timeout=30,
        message="the retry to succeed on the rescuer",
    )
    first, second = query(database_url, "SELECT * FROM run ORDER BY id")
    assert (first["owner"], first["status"], first["finished_by"]) == (
        dying_id,
        "interrupted",
        rescuer_id,
    )
    assert (second["owner"], second["status"]) == (rescuer_id, "success")
    delay = (first["finished_at"] - killed_at).total_seconds()
    bound = TTL + GRACE + RECONCILE
    print(f"takeover {delay:.2f}s after SIGKILL (bound TTL+grace+reconcile = {bound:.0f}s)")
    assert delay <= bound + 1.0  # + one poll and scheduling slack on a 2-core machine
    assert processes_matching("sleep 4244.125") == []


def test_a_frozen_daemons_job_is_stopped_by_its_watchdog_before_the_takeover_and_it_writes_nothing(
    spawn, cli, database_url, tmp_path
) -> None:
    marker = "4245.125"
    _add(cli, "frozen", _second_attempt_succeeds(tmp_path / "ran", marker))
    zombie = spawn(database_url, "zombie", env={"SCHEDULER_LOG_LEVEL": "debug"})
    zombie.instance_id()
    cli("tasks", "trigger", "frozen")
    wait_for(lambda: processes_matching(f"sleep {marker}"), message="the first attempt's job")
    rescuer = spawn(database_url, "rescuer")
    rescuer.instance_id()
    os.kill(zombie.pid, signal.SIGSTOP)
    try:
        wait_for(
            lambda: processes_matching(f"sleep {marker}") == [],
            timeout=10,
            message="the watchdog to kill the frozen daemon's job",
        )
        job_gone_at = datetime.now(UTC)
        wait_for(
            lambda: query(database_url, "SELECT 1 FROM occurrence WHERE status = 'success'"),
            timeout=30,
            message="the retry to succeed on the rescuer",
        )
        first, second = query(database_url, "SELECT * FROM run ORDER BY id")
        margin = (first["takeover_at"] - job_gone_at).total_seconds()
        print(
            f"zombie's job gone {margin:.2f}s before its takeover point; retry started "
            f"{(second['started_at'] - job_gone_at).total_seconds():.2f}s after"
        )
        assert job_gone_at < first["takeover_at"] < second["started_at"]  # no overlap
        rescuer.stop()
        before = snapshot(database_url)
    finally:
        os.kill(zombie.pid, signal.SIGCONT)
    wait_for(
        lambda: '"run_fenced"' in zombie.log(),
        timeout=15,
        message="the woken zombie to learn it was fenced",
    )
    # Two more full loop passes (completion included) in which a zombie would write.
    passes = zombie.log().count('"reconcile_pass"')
    wait_for(
        lambda: zombie.log().count('"reconcile_pass"') >= passes + 2,
        timeout=10,
        message="two more passes of the woken daemon",
    )
    assert snapshot(database_url) == before
    assert zombie.stop() == 0


def test_a_database_restart_causes_no_mass_takeover_and_owners_outcomes_land(
    spawn, cli, owned_server, tmp_path
) -> None:
    # Forced window: the owner is frozen across the restart, so the only reconciler awake is
    # the other daemon, right after the server came back, when every lease has run out. Without
    # the quiet period after pg_postmaster_start_time() it would take over all of them and
    # rerun jobs that had in fact finished.
    from scheduler_daemon.storage import migration

    owned_server.start()
    url = owned_server.url
    migration.upgrade(url)
    for i in range(3):
        _add(cli, f"job{i}", "sleep 3", url=url)
    # The jobs finish within their trust deadline (launch + TTL - margin = 7.2 s) while the
    # owner is frozen; the leases' takeover points (last renewal + 11 s) pass while the
    # server is down; the quiet period after the restart is TTL + grace = 11 s.
    timing = ("--lease-ttl", "9s", "--lease-grace", "2s")
    owner = spawn(url, "owner", *timing)
    owner.instance_id()
    for i in range(3):
        cli("tasks", "trigger", f"job{i}", url=url)
    wait_for(
        lambda: len(query(url, "SELECT 1 FROM run WHERE status = 'running'")) == 3,
        message="three runs on the owner",
    )
    other = spawn(url, "other", *timing, env={"SCHEDULER_LOG_LEVEL": "debug"})
    other.instance_id()
    os.kill(owner.pid, signal.SIGSTOP)
    try:
        owned_server.stop()
        time.sleep(9 + 2 + 1)  # every lease and its grace run out while the server is down
        owned_server.start()
        passes = other.log().count('"reconcile_pass"')
        wait_for(
            lambda: other.log().count('"reconcile_pass"') >= passes + 2,
            timeout=6,
            message="the other daemon to reconcile twice after the restart",
        )
        assert query(url, "SELECT id FROM run WHERE status <> 'running'") == []
    finally:
        os.kill(owner.pid, signal.SIGCONT)
    wait_for(
        lambda: len(query(url, "SELECT 1 FROM run WHERE status = 'success'")) == 3,
        timeout=30,
        message="the owner's kept outcomes to land",
    )
    assert query(url, "SELECT count(*) AS n FROM run")[0]["n"] == 3  # nothing ran twice
    assert owner.stop() == 0
    assert other.stop() == 0
