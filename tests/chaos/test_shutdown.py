"""Real daemon processes: SIGTERM drain, SIGKILL cleanup of job processes, `runs cancel`."""

import signal
import time
from pathlib import Path

import pytest

from tests.support import processes_matching, query, wait_for

pytestmark = pytest.mark.slow


def _add(cli, name: str, command: str) -> int:
    result = cli("tasks", "add", name, "--every", "1h", "--command", command, "--json")
    assert result.code == 0, result.err
    return result.json()["id"]


def _running_run(url: str) -> dict:
    return wait_for(
        lambda: query(url, "SELECT * FROM run WHERE status = 'running'"), message="a running run"
    )[0]


def test_sigterm_lets_a_job_finish_within_the_drain_timeout(
    spawn, cli, database_url, tmp_path
) -> None:
    _add(cli, "short", "sleep 1")
    daemon = spawn(database_url, "drain", "--drain-timeout", "5s")
    daemon.instance_id()
    cli("tasks", "trigger", "short")
    _running_run(database_url)
    daemon.signal(signal.SIGTERM)
    assert daemon.proc.wait(20) == 0, daemon.log()
    (run,) = query(database_url, "SELECT status FROM run")
    assert run["status"] == "success"
    assert query(database_url, "SELECT * FROM instance") == []  # deregistered


def test_a_job_past_the_drain_timeout_is_interrupted_and_runs_again_on_another_daemon(
    spawn, cli, database_url, tmp_path: Path
) -> None:
    marker = tmp_path / "first-attempt-ran"
    # The first run sleeps past the drain timeout; the second finds the marker and succeeds.
    _add(cli, "long", f"if [ -e {marker} ]; then exit 0; fi; touch {marker}; sleep 60")
    first = spawn(database_url, "first", "--drain-timeout", "1s")
    first_id = first.instance_id()
    cli("tasks", "trigger", "long")
    _running_run(database_url)
    first.signal(signal.SIGTERM)
    assert first.proc.wait(20) == 0, first.log()
    (run,) = query(database_url, "SELECT status, owner FROM run")
    assert run == {"status": "interrupted", "owner": first_id}
    (occ,) = query(database_url, "SELECT status, attempts, interruptions FROM occurrence")
    assert occ == {"status": "queued", "attempts": 0, "interruptions": 1}
    second = spawn(database_url, "second")
    second_id = second.instance_id()
    try:
        wait_for(
            lambda: query(database_url, "SELECT 1 FROM occurrence WHERE status = 'success'"),
            message="the second attempt to succeed",
        )
    finally:
        second.stop()
    runs = query(database_url, "SELECT status, owner FROM run ORDER BY id")
    assert runs == [
        {"status": "interrupted", "owner": first_id},
        {"status": "success", "owner": second_id},
    ]


def test_sigkill_of_a_daemon_leaves_no_process_of_its_shell_jobs(
    spawn, cli, database_url, tmp_path
) -> None:
    marker = "4242.125"  # a sleep argument no other process on the machine uses
    _add(cli, "orphan", f"sleep {marker} & sleep {marker} & wait")
    daemon = spawn(database_url, "killed")
    daemon.instance_id()
    cli("tasks", "trigger", "orphan")
    wait_for(
        lambda: len(processes_matching(f"sleep {marker}")) >= 2,
        message="the job's two grandchildren",
    )
    daemon.proc.kill()
    daemon.proc.wait(10)
    started = time.monotonic()
    wait_for(
        lambda: processes_matching(f"sleep {marker}") == [],
        timeout=10,
        message="the job's process group to be killed",
    )
    print(f"job processes gone {time.monotonic() - started:.3f}s after SIGKILL of the daemon")


def test_runs_cancel_stops_a_running_shell_job_within_one_renewal_interval(
    spawn, cli, database_url, tmp_path
) -> None:
    marker = "4243.125"
    _add(cli, "victim", f"sleep {marker}")
    daemon = spawn(database_url, "cancel")
    daemon.instance_id()
    cli("tasks", "trigger", "victim")
    run = _running_run(database_url)
    wait_for(lambda: processes_matching(f"sleep {marker}"), message="the job process")
    result = cli("runs", "cancel", str(run["id"]))
    assert result.code == 0, result.err
    cancelled = time.monotonic()
    wait_for(
        lambda: processes_matching(f"sleep {marker}") == [],
        timeout=5,
        message="the cancelled job to stop",
    )
    elapsed = time.monotonic() - cancelled
    print(f"cancelled job stopped after {elapsed:.3f}s (renewal interval 1s)")
    assert elapsed < 1.0 + 0.5  # one renewal interval (TTL 3s / 3) plus the kill
    # The daemon records the outcome on its pass after the job's process is gone, not with it.
    wait_for(
        lambda: query(database_url, "SELECT status FROM occurrence")[0]["status"] != "running",
        timeout=5,
        message="the cancelled run's outcome to be recorded",
    )
    (occ,) = query(database_url, "SELECT status, reason FROM occurrence")
    assert occ["status"] == "cancelled"
    assert occ["reason"].startswith("cancelled by ")
    (row,) = query(database_url, "SELECT status FROM run")
    assert row["status"] == "cancelled"  # the fenced daemon wrote nothing over it
    assert daemon.stop() == 0


def test_a_second_signal_stops_at_once_without_waiting_for_the_drain(
    spawn, cli, database_url, tmp_path
) -> None:
    marker = "4246.125"
    _add(cli, "stubborn", f"sleep {marker}")
    daemon = spawn(database_url, "impatient", "--drain-timeout", "5s")
    daemon.instance_id()
    cli("tasks", "trigger", "stubborn")
    _running_run(database_url)
    daemon.signal(signal.SIGTERM)
    wait_for(lambda: '"drain_started"' in daemon.log(), message="the drain to start")
    second = time.monotonic()
    daemon.signal(signal.SIGTERM)
    assert daemon.proc.wait(20) == 0, daemon.log()
    elapsed = time.monotonic() - second
    print(f"exited {elapsed:.2f}s after the second signal (drain timeout 5s)")
    assert elapsed < 5.0
    (run,) = query(database_url, "SELECT status FROM run")
    assert run["status"] == "interrupted"
    assert processes_matching(f"sleep {marker}") == []
