"""Real daemons running in-process jobs (ADR 0009): a job that ignores a stop past
--in-process-stop-grace ends its daemon with exit 8 and its run is taken over by a peer; a job
still running when renewals stop ends its daemon with exit 9 before the run's takeover point;
a SIGTERM drain records a job that ignores the stop `interrupted`, queued again no earlier than
twice the poll interval after that write.

These tasks are added with `--in-process` (the task field and the launcher's routing by the
claim's `in_process`, issue 33's other half); without them the tests skip, saying so."""

import signal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from scheduler_daemon.executors.inprocess import ABANDONED_ERROR
from scheduler_daemon.runtime.supervision import EXIT_IN_PROCESS_STUCK, EXIT_IN_PROCESS_UNTRUSTED
from tests.support import query, wait_for

pytestmark = pytest.mark.slow

STUBBORN = "tests.inprocess_jobs:sleeper"  # sleeps 60 s whatever it is asked


def _add_in_process(cli: Any, name: str, target: str, *options: str) -> int:
    result = cli(
        "tasks", "add", name, "--every", "1h", "--call", target, "--in-process", *options, "--json"
    )
    if result.code == 2 and "--in-process" in result.err:
        pytest.skip("needs the task's --in-process field and its routing (issue 33)")
    assert result.code == 0, result.err
    return int(result.json()["id"])


def _running_run(url: str) -> dict[str, Any]:
    return wait_for(
        lambda: query(url, "SELECT * FROM run WHERE status = 'running'"), message="a running run"
    )[0]


def test_a_job_ignoring_its_timeout_past_the_stop_grace_exits_8_and_a_peer_takes_its_run_over(
    spawn: Any, cli: Any, database_url: str, tmp_path: Path
) -> None:
    """Fails on a daemon that records the timeout while the thread still runs (its run would
    end `timeout` at once, written by the first daemon) or that never exits (the run would
    stay `running` and renewed, the first daemon alive)."""
    marker = tmp_path / "first-attempt"
    target = "tests.inprocess_jobs:sleeper_once"
    _add_in_process(cli, "stuck", target, "--timeout", "1s")
    first = spawn(
        database_url, "first", "--in-process-stop-grace", "1s", env={"INPROC_MARKER": str(marker)}
    )
    first.instance_id()
    cli("tasks", "trigger", "stuck")
    run = _running_run(database_url)

    assert first.proc.wait(30) == EXIT_IN_PROCESS_STUCK, first.log()
    assert '"in_process_job_stuck"' in first.log()
    (after,) = query(database_url, "SELECT status FROM run WHERE id = %s", (run["id"],))
    assert after["status"] == "running"  # left to the takeover, not written by its owner

    second = spawn(database_url, "second", env={"INPROC_MARKER": str(marker)})
    second_id = second.instance_id()
    try:
        wait_for(
            lambda: query(database_url, "SELECT 1 FROM occurrence WHERE status = 'success'"),
            timeout=60,
            message="the peer's attempt to succeed",
        )
    finally:
        second.stop()
    runs = query(database_url, "SELECT status, owner, finished_by FROM run ORDER BY id")
    assert [r["status"] for r in runs] == ["interrupted", "success"]
    assert runs[0]["finished_by"] == second_id  # taken over by the peer
    assert runs[1]["owner"] == second_id


def test_a_job_running_when_renewals_stop_exits_9_before_the_takeover_point(
    spawn: Any, cli: Any, database_url: str
) -> None:
    """A second session holds the run's row, so the lease keeper cannot renew it (nothing
    else is disturbed). Fails on a daemon that only asks the thread to stop at its trust
    deadline: the job would run on past the takeover point, beside a retry."""
    _add_in_process(cli, "held", STUBBORN)
    daemon = spawn(database_url, "untrusted")
    daemon.instance_id()
    cli("tasks", "trigger", "held")
    run = _running_run(database_url)
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT 1 FROM run WHERE id = %s FOR UPDATE", (run["id"],))
        code = daemon.proc.wait(30)
        (row,) = query(
            database_url,
            "SELECT status, clock_timestamp() < takeover_at AS before_takeover FROM run "
            "WHERE id = %s",
            (run["id"],),
        )
        holder.rollback()

    assert code == EXIT_IN_PROCESS_UNTRUSTED, daemon.log()
    assert '"in_process_trust_deadline_passed"' in daemon.log()
    assert row == {"status": "running", "before_takeover": True}


def test_sigterm_requeues_a_job_ignoring_the_stop_twice_the_poll_interval_after_the_write(
    spawn: Any, cli: Any, database_url: str
) -> None:
    """Fails on a drain that writes it as a process job (queued at once, while its thread
    still runs until the process is gone)."""
    _add_in_process(cli, "draining", STUBBORN)
    daemon = spawn(database_url, "drained", "--drain-timeout", "1s", "--poll-interval", "500ms")
    daemon.instance_id()
    cli("tasks", "trigger", "draining")
    run = _running_run(database_url)

    daemon.signal(signal.SIGTERM)
    assert daemon.proc.wait(30) == 0, daemon.log()

    (row,) = query(
        database_url,
        "SELECT r.status, r.error, o.status AS occ_status, o.not_before - r.finished_at AS wait "
        "FROM run r JOIN occurrence o ON o.id = r.occurrence_id WHERE r.id = %s",
        (run["id"],),
    )
    assert (row["status"], row["error"], row["occ_status"]) == (
        "interrupted",
        ABANDONED_ERROR,
        "queued",
    )
    assert row["wait"].total_seconds() >= 2 * 0.5
    assert '"run_interrupted_in_process_at_exit"' in daemon.log()
