"""A real daemon with three long jobs, and a second session holding one row the lease keeper
writes, longer than a job's trust deadline (issue 31 item 1, guarantee 4: one held row delays only
its own takeover). Holding ONE run row: only that run's job may be killed (`killed: trust deadline
passed`); the daemon's other jobs keep running and end `success` in their one run. Holding the
instance row: no job is killed at all.

Both fail on 518d2f3, where a renewal pass was one transaction that wrote the heartbeat and
renewed every run with a 5 s lock wait: the held row made the whole pass wait, so no run was
renewed and the watchdog killed every job of the daemon at its trust deadline (2.4 s after the
last renewal with the 3 s TTL of tests.support.FAST)."""

import time

import psycopg
import pytest

from tests.support import processes_matching, query, wait_for

pytestmark = pytest.mark.slow

TRUST = 2.4  # TTL 3 s (tests.support.FAST) minus TTL/5
MARKERS = {"one": "sleep 9.3101", "two": "sleep 9.3102", "three": "sleep 9.3103"}


def _three_running_jobs(spawn, cli, url: str):
    """A daemon running three long jobs of three tasks; returns it, each task's run id and the
    pids of each task's first job (a retry's job would carry the same command line)."""
    daemon = spawn(url, "renewer")
    daemon.instance_id()
    for name, command in MARKERS.items():
        assert cli("tasks", "add", name, "--every", "1h", "--command", command).code == 0
        assert cli("tasks", "trigger", name).code == 0
    pids = {
        name: set(wait_for(lambda m=marker: processes_matching(m), message=f"the job {marker}"))
        for name, marker in MARKERS.items()
    }
    rows = query(
        url,
        "SELECT r.id, t.name FROM run r JOIN occurrence o ON o.id = r.occurrence_id "
        "JOIN task t ON t.id = o.task_id WHERE r.status = 'running'",
    )
    runs = {row["name"]: row["id"] for row in rows}
    assert sorted(runs) == sorted(MARKERS)
    return daemon, runs, pids


def _alive(pids: set[int], marker: str) -> bool:
    """Whether every one of these processes of the job still runs."""
    return pids <= set(processes_matching(marker))


def _one_successful_run(url: str, names: list[str]) -> None:
    """Each task's only run ended `success`: its job was never killed and never ran again."""
    for name in names:
        rows = wait_for(
            lambda n=name: query(
                url,
                "SELECT r.status, r.error FROM run r JOIN occurrence o ON o.id = r.occurrence_id"
                " JOIN task t ON t.id = o.task_id WHERE t.name = %s AND r.status <> 'running'",
                (n,),
            ),
            timeout=30,
            message=f"the run of {name} to end",
        )
        assert rows == [{"status": "success", "error": None}], (name, rows)


def test_one_run_row_held_past_the_trust_deadline_kills_only_that_runs_job(
    spawn, cli, database_url
) -> None:
    url = database_url
    daemon, runs, pids = _three_running_jobs(spawn, cli, url)
    with psycopg.connect(url) as holder:
        holder.execute("SELECT 1 FROM run WHERE id = %s FOR UPDATE", (runs["one"],))
        held_at = time.monotonic()
        # The held run's renewals stop: its job passes its trust deadline and is killed.
        wait_for(
            lambda: not pids["one"] & set(processes_matching(MARKERS["one"])),
            timeout=10,
            message="the watchdog to kill the job whose run row is held",
        )
        # Past its deadline, with a margin: the other jobs run on, renewed pass after pass.
        time.sleep(max(0.0, held_at + TRUST + 1.0 - time.monotonic()))
        for name in ("two", "three"):
            assert _alive(pids[name], MARKERS[name]), f"{name}'s job was killed: {daemon.log()}"
    _one_successful_run(url, ["two", "three"])
    log = daemon.log()
    assert '"run_renewal_locked"' in log
    assert log.count("killed: trust deadline passed") >= 1
    (first,) = query(url, "SELECT error FROM run WHERE id = %s", (runs["one"],))
    assert first["error"] == "killed: trust deadline passed"
    assert daemon.proc.poll() is None, log  # not a failed keeper (exit 7)
    assert daemon.stop() == 0, daemon.log()


def test_the_instance_row_held_past_the_trust_deadline_kills_no_job(
    spawn, cli, database_url
) -> None:
    url = database_url
    daemon, _, pids = _three_running_jobs(spawn, cli, url)
    with psycopg.connect(url) as holder:
        holder.execute("SELECT 1 FROM instance FOR UPDATE")
        # Held for twice a job's trust deadline: every job runs on, renewed without a heartbeat.
        time.sleep(2 * TRUST)
        for name, marker in MARKERS.items():
            assert _alive(pids[name], marker), f"{name}'s job was killed: {daemon.log()}"
    _one_successful_run(url, list(MARKERS))
    log = daemon.log()
    assert '"instance_heartbeat_locked"' in log
    assert "killed: trust deadline passed" not in log
    assert daemon.proc.poll() is None, log
    assert daemon.stop() == 0, daemon.log()
