"""The shell executor and its watchdog: outcomes, group kills, and an owner that dies or freezes."""

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler_daemon.domain.status import OutcomeStatus
from scheduler_daemon.executors.base import Outcome
from scheduler_daemon.executors.shell import WATCHDOG_DIED, ShellExecutor, ShellJob
from scheduler_daemon.executors.wire import NOT_STARTED_ERROR, OUTPUT_TAIL_BYTES
from tests.unit.executor_support import KILL_MARGIN, context, wait_outcome


def _in_two_processes(shell: ShellExecutor, command: str) -> tuple[Any, int]:
    """A job of `command` once its process group holds two processes: (the job, its pgid)."""
    job = shell.start(context(), {"command": command})
    pgid = wait_pgid(job)
    wait_group_has(pgid, 2)
    return job, pgid


def _ended(job: Any, wake: threading.Event) -> tuple[str, int | None, str | None]:
    """(status, exit_code, error) of `job`'s outcome, once it has one."""
    outcome = wait_outcome(job, wake)
    return outcome.status, outcome.exit_code, outcome.error


@pytest.fixture
def shell(wake: threading.Event, tmp_path: Path) -> Iterator[ShellExecutor]:
    executor = ShellExecutor(wake, tmp_path / "spool")
    yield executor
    executor.close()


def wait_pgid(job: ShellJob, within: float = 5.0) -> int:
    limit = time.monotonic() + within
    while job.pgid is None:
        assert time.monotonic() < limit, "watchdog never reported the job started"
        time.sleep(0.005)
    return job.pgid


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`, read from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, _ppid, pgrp = stat.rsplit(")", 1)[1].split()[:3]
        if int(pgrp) == pgid and state != "Z":
            members.append(int(entry))
    return members


def wait_group_gone(pgid: int, within: float) -> float:
    """Seconds until no live process of group `pgid` is left; fails after `within`."""
    start = time.monotonic()
    while group_members(pgid):
        assert time.monotonic() - start < within, f"group {pgid} alive: {group_members(pgid)}"
        time.sleep(0.005)
    return time.monotonic() - start


def wait_group_has(pgid: int, count: int, within: float = 5.0) -> None:
    limit = time.monotonic() + within
    while len(group_members(pgid)) < count:
        assert time.monotonic() < limit, "the job never started its children"
        time.sleep(0.005)


def test_a_command_that_exits_zero_succeeds_with_its_output(
    shell: ShellExecutor, wake: threading.Event
) -> None:
    job = shell.start(context(), {"command": "echo hello; echo oops >&2"})

    outcome = wait_outcome(job, wake)

    assert outcome == Outcome("success", exit_code=0, output_tail="hello\noops\n")
    assert type(outcome.status) is OutcomeStatus  # converted from the watchdog's wire string
    assert job.poll() is outcome


def test_a_nonzero_exit_fails_with_the_exit_code(
    shell: ShellExecutor, wake: threading.Event
) -> None:
    outcome = wait_outcome(shell.start(context(), {"command": "echo partial; exit 3"}), wake)

    assert outcome.status == "failed"
    assert outcome.exit_code == 3
    assert outcome.error == "exit code 3"
    assert outcome.output_tail == "partial\n"


def test_a_command_killed_by_a_signal_reports_minus_the_signal_number(
    shell: ShellExecutor, wake: threading.Event
) -> None:
    outcome = wait_outcome(shell.start(context(), {"command": "kill -SEGV $$"}), wake)

    assert outcome.status == "failed"
    assert outcome.exit_code == -signal.SIGSEGV
    assert outcome.error == "killed by signal SIGSEGV (11)"


def test_the_timeout_kills_the_job_and_reports_timeout(
    shell: ShellExecutor, wake: threading.Event
) -> None:
    job = shell.start(context(timeout=0.3), {"command": "sleep 100 & wait"})
    pgid = wait_pgid(job)

    assert _ended(job, wake) == ("timeout", -signal.SIGKILL, "timed out after 0.3 s")
    wait_group_gone(pgid, within=1.0)


def test_stop_terminates_the_whole_process_group_with_the_given_reason(
    shell: ShellExecutor, wake: threading.Event
) -> None:
    job, pgid = _in_two_processes(shell, "sleep 100 & wait")

    job.stop("lease lost")

    assert _ended(job, wake) == ("stopped", -signal.SIGTERM, "lease lost")
    wait_group_gone(pgid, within=1.0)


def test_stop_escalates_to_sigkill_when_the_job_ignores_sigterm(
    shell: ShellExecutor, wake: threading.Event
) -> None:
    job, pgid = _in_two_processes(shell, "trap '' TERM; echo ready; sleep 100 & wait")
    stopped_at = time.monotonic()

    job.stop("shutting down")
    outcome = wait_outcome(job, wake)

    took = time.monotonic() - stopped_at
    assert outcome.status == "stopped"
    assert outcome.error == "shutting down"
    assert outcome.exit_code == -signal.SIGKILL
    assert 1.0 <= took < 1.0 + KILL_MARGIN
    wait_group_gone(pgid, within=0.5)


def test_the_trust_deadline_kills_the_group_within_the_margin(
    shell: ShellExecutor, wake: threading.Event
) -> None:
    ctx = context(deadline_in=0.5)
    job = shell.start(ctx, {"command": "sleep 30 & wait"})
    pgid = wait_pgid(job)

    wait_group_gone(pgid, within=0.5 + KILL_MARGIN + 0.5)
    latency = time.monotonic() - ctx.deadline
    outcome = wait_outcome(job, wake)

    print(f"group gone {latency * 1000:.1f} ms after the trust deadline")
    assert 0 <= latency < KILL_MARGIN
    assert outcome.status == "stopped"
    assert outcome.error == "killed: trust deadline passed"


def test_the_watchdog_spawns_nothing_once_the_trust_deadline_passed(
    shell: ShellExecutor, wake: threading.Event, tmp_path: Path
) -> None:
    # The window is forced: the watchdog is frozen while the start is on its way, and thawed
    # past the deadline (a daemon stalled between its claim and the spawn). On 518d2f3 it
    # spawned the job anyway and killed it a moment later: the command ran.
    marker = tmp_path / "ran"
    assert wait_outcome(shell.start(context(run_id=1), {"command": "true"}), wake).status == (
        "success"
    )
    watchdog = shell.watchdog_pid
    assert watchdog is not None
    os.kill(watchdog, signal.SIGSTOP)
    try:
        job = shell.start(context(run_id=2, deadline_in=0.3), {"command": f"touch {marker}"})
        time.sleep(0.5)
    finally:
        os.kill(watchdog, signal.SIGCONT)

    assert wait_outcome(job, wake) == Outcome("stopped", error=NOT_STARTED_ERROR)
    assert not marker.exists()
    # Within its deadline the same command runs, on the same watchdog.
    started = shell.start(context(run_id=3), {"command": f"touch {marker}"})
    assert wait_outcome(started, wake).status == "success"
    assert marker.exists()
    assert shell.watchdog_pid == watchdog


def test_extend_keeps_a_job_alive_past_its_original_deadline(
    shell: ShellExecutor, wake: threading.Event
) -> None:
    job = shell.start(context(deadline_in=0.3), {"command": "sleep 0.8; echo done"})
    job.extend(time.monotonic() + 5.0)

    outcome = wait_outcome(job, wake)

    assert outcome.status == "success"
    assert outcome.output_tail == "done\n"


def test_the_output_tail_is_bounded_for_megabytes_of_output(
    shell: ShellExecutor, wake: threading.Event, tmp_path: Path
) -> None:
    command = "head -c 5000000 /dev/zero | tr '\\0' x; echo; echo the end"
    outcome = wait_outcome(shell.start(context(), {"command": command}), wake)

    assert outcome.status == "success"
    assert len(outcome.output_tail.encode()) <= OUTPUT_TAIL_BYTES
    assert outcome.output_tail.endswith("x\nthe end\n")
    assert list((tmp_path / "spool").iterdir()) == []  # the spool file is deleted once read


def test_the_run_identifiers_are_in_the_job_environment(
    shell: ShellExecutor, wake: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    command = "env | grep -E '^(SCHEDULER_|HOME=)' | sort"
    outcome = wait_outcome(shell.start(context(run_id=42), {"command": command}), wake)

    lines = set(outcome.output_tail.splitlines())
    assert {
        "SCHEDULER_TASK_NAME=nightly-report",
        "SCHEDULER_TASK_ID=3",
        "SCHEDULER_OCCURRENCE_ID=7",
        "SCHEDULER_RUN_ID=42",
        "SCHEDULER_SCHEDULED_FOR=2024-05-01T12:30:00+00:00",
        "SCHEDULER_ATTEMPT=2",
        "SCHEDULER_LEASE_TOKEN=5",
        "SCHEDULER_IDEMPOTENCY_KEY=occ-7-key",
        "SCHEDULER_RUN_UUID=0b7e4a52-6c1d-4c9e-9a53-2f1d8e0c7a11",
    } <= lines
    assert f"HOME={os.environ['HOME']}" in lines  # the daemon's own environment is kept


def test_background_processes_left_by_a_finished_command_are_killed(
    shell: ShellExecutor, wake: threading.Event
) -> None:
    job = shell.start(context(), {"command": "sleep 100 >/dev/null 2>&1 & echo left"})
    pgid = wait_pgid(job)

    outcome = wait_outcome(job, wake)

    assert outcome.status == "success"
    wait_group_gone(pgid, within=1.0)


def test_a_payload_without_a_command_fails_without_raising(
    shell: ShellExecutor, wake: threading.Event
) -> None:
    outcome = wait_outcome(shell.start(context(), {"cmd": "true"}), wake)

    assert outcome == Outcome("failed", error="payload has no 'command'")


def test_a_command_whose_spool_cannot_be_opened_fails_without_raising(
    wake: threading.Event, tmp_path: Path
) -> None:
    executor = ShellExecutor(wake, tmp_path / "spool")
    (tmp_path / "spool").rmdir()  # gone after the executor made it
    try:
        outcome = wait_outcome(executor.start(context(), {"command": "true"}), wake)
    finally:
        executor.close()

    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error.startswith("cannot start: ")


def test_a_dead_watchdog_fails_its_jobs_and_a_new_one_runs_later_jobs(
    shell: ShellExecutor, wake: threading.Event
) -> None:
    job = shell.start(context(), {"command": "sleep 100 & wait"})
    pgid = wait_pgid(job)
    first = shell.watchdog_pid
    assert first is not None

    os.kill(first, signal.SIGKILL)
    outcome = wait_outcome(job, wake)

    assert outcome.status == "failed"
    assert outcome.error == WATCHDOG_DIED
    wait_group_gone(pgid, within=1.0)  # the executor killed the orphaned group itself
    later = wait_outcome(shell.start(context(), {"command": "echo again"}), wake)
    assert later.output_tail == "again\n"
    assert shell.watchdog_pid not in (None, first)


def test_the_watchdog_outlives_the_daemon_thread_that_started_it(
    shell: ShellExecutor, wake: threading.Event
) -> None:
    # PR_SET_PDEATHSIG fires when the *thread* that forked the watchdog exits, not the process;
    # the thread lives until a job has run, so the watchdog has surely set its death signal.
    first: list[Outcome] = []
    starter = threading.Thread(
        target=lambda: first.append(wait_outcome(shell.start(context(), {"command": "true"}), wake))
    )
    starter.start()
    starter.join()
    watchdog = shell.watchdog_pid

    later = shell.start(context(), {"command": "sleep 0.3"})

    assert first[0].status == "success"
    assert wait_outcome(later, wake).status == "success"
    assert shell.watchdog_pid == watchdog


def test_close_stops_running_jobs_and_reaps_the_watchdog(
    wake: threading.Event, tmp_path: Path
) -> None:
    executor = ShellExecutor(wake, tmp_path / "spool")
    job = executor.start(context(), {"command": "sleep 100 & wait"})
    pgid = wait_pgid(job)
    watchdog = executor.watchdog_pid
    assert watchdog is not None

    executor.close()

    assert job.poll() == Outcome("stopped", exit_code=-signal.SIGTERM, error="executor closed")
    assert group_members(pgid) == []
    assert not Path(f"/proc/{watchdog}").exists()  # exited and reaped


OWNER = textwrap.dedent(
    """
    import sys, threading, time
    from datetime import UTC, datetime
    from scheduler_daemon.executors.base import JobContext
    from scheduler_daemon.executors.shell import ShellExecutor

    deadline_in = float(sys.argv[1])
    executor = ShellExecutor(threading.Event())
    ctx = JobContext(1, "owner", 1, 1, datetime.now(UTC), 1, 1, "k", None,
                     time.monotonic() + deadline_in, "0b7e4a52-6c1d-4c9e-9a53-2f1d8e0c7a11")
    job = executor.start(ctx, {"command": "sleep 100 & wait"})
    limit = time.monotonic() + 10
    while job.pgid is None and time.monotonic() < limit:
        time.sleep(0.005)
    print(job.pgid, flush=True)
    time.sleep(120)
    """
)


def start_owner(deadline_in: float) -> tuple[subprocess.Popen[str], int]:
    """A process that owns a ShellExecutor running `sleep 100 & wait`; and that job's pgid."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(deadline_in)], stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None
    pgid = int(owner.stdout.readline())
    wait_group_has(pgid, 2)
    return owner, pgid


def test_sigkill_of_the_owning_process_leaves_no_process_of_the_group_alive() -> None:
    owner, pgid = start_owner(deadline_in=60.0)

    owner.kill()
    owner.wait()

    took = wait_group_gone(pgid, within=2.0)
    print(f"group gone {took * 1000:.1f} ms after the owner was SIGKILLed")


def test_a_sigstopped_owner_cannot_keep_its_job_past_the_deadline() -> None:
    owner, pgid = start_owner(deadline_in=1.0)
    started = time.monotonic()
    owner.send_signal(signal.SIGSTOP)
    try:
        wait_group_gone(pgid, within=1.0 + KILL_MARGIN)
        print(
            f"group gone {(time.monotonic() - started) * 1000:.0f} ms after SIGSTOP (deadline 1 s)"
        )
    finally:
        owner.kill()  # SIGKILL works on a stopped process
        owner.wait()


def test_a_runs_traceparent_is_in_its_job_environment_and_only_its_own(
    shell: ShellExecutor, wake: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRACEPARENT", raising=False)  # the watchdog starts with this environment
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    command = {"command": 'printf %s "${TRACEPARENT-unset}"'}
    traced = dataclasses.replace(context(), traceparent=traceparent)
    assert wait_outcome(shell.start(traced, command), wake).output_tail == traceparent
    assert wait_outcome(shell.start(context(), command), wake).output_tail == "unset"


def test_arguments_of_non_ascii_text_at_the_limit_start_a_shell_job(shell, wake) -> None:
    """SCHEDULER_ARGS is the UTF-8 JSON the limit measured: escaped as ASCII, 64 KiB of emoji
    became 192 KiB, and Linux refuses one environment string over 128 KiB (E2BIG), so the job
    could never start, on any attempt (found by review; fails with ensure_ascii)."""
    import json

    from scheduler_daemon.domain import argument, limit

    value = "\U0001f600" * ((limit.MAX_ARGS_BYTES - 8) // 4)
    args = argument.trigger_args((), json.dumps({"a": value}))  # within the limit
    assert args is not None
    ctx = dataclasses.replace(context(), args=args)
    outcome = wait_outcome(shell.start(ctx, {"command": 'printf %s "$SCHEDULER_ARGS"'}), wake)
    assert outcome.status == "success", outcome
    assert outcome.output_tail.endswith('\U0001f600"}')
