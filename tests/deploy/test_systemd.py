"""The systemd unit: notify protocol, watchdog and shutdown timing that fit the daemon's settings,
and `systemd-analyze verify` on a copy whose ExecStart is this checkout's entry point."""

import re
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from scheduler_daemon.domain.duration import parse_duration
from scheduler_daemon.settings import SHUTDOWN_MARGIN, DaemonSettings

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "systemd" / "scheduler-daemon.service"
# The longest healthy gap between two loop passes besides the poll interval: a pass bounded by the
# 30 s statement timeout, or a dead connection that TCP keepalives declare dead in about 60 s.
LONGEST_PASS = timedelta(seconds=90)


def _directives(text: str) -> dict[tuple[str, str], list[str]]:
    """(section, key) → values in order; systemd allows a key more than once."""
    found: dict[tuple[str, str], list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        found.setdefault((section, key.strip()), []).append(value.strip())
    return found


def _one(directives: dict[tuple[str, str], list[str]], key: str) -> str:
    (value,) = directives[("Service", key)]
    return value


def test_the_unit_reports_readiness_and_keepalives_and_waits_for_the_database() -> None:
    unit = _directives(UNIT.read_text())
    assert _one(unit, "Type") == "notify"
    assert _one(unit, "NotifyAccess") == "main"  # a job cannot send READY=1 or WATCHDOG=1
    # READY=1 only after registering: a database that is down at start must not fail the start.
    assert _one(unit, "TimeoutStartSec") == "infinity"
    watchdog = parse_duration(_one(unit, "WatchdogSec"))
    assert watchdog >= DaemonSettings.poll_interval + LONGEST_PASS
    # Exits after --max-failed-passes, watchdog aborts and crashes are restarted; a drain is not.
    assert _one(unit, "Restart") == "on-failure"


def test_the_unit_retries_a_schema_behind_but_not_one_past_this_build() -> None:
    from scheduler_daemon.cli.base import EXIT_SCHEMA_BEHIND, EXIT_SCHEMA_SHAPE, EXIT_SCHEMA_TOO_NEW

    prevented = _one(_directives(UNIT.read_text()), "RestartPreventExitStatus").split()
    assert str(EXIT_SCHEMA_TOO_NEW) in prevented  # only a newer build helps
    assert str(EXIT_SCHEMA_BEHIND) not in prevented  # `migrate` will come
    assert str(EXIT_SCHEMA_SHAPE) in prevented  # only a recreated database or its own build helps


def test_the_unit_restarts_a_daemon_whose_lease_keeper_failed() -> None:
    from scheduler_daemon.runtime.supervision import EXIT_FAILED_PASSES, EXIT_LEASE_KEEPER_FAILED

    unit = _directives(UNIT.read_text())
    prevented = _one(unit, "RestartPreventExitStatus").split()
    assert _one(unit, "Restart") == "on-failure"
    # A new process brings a new keeper on a new connection (ADR 0005).
    assert str(EXIT_LEASE_KEEPER_FAILED) not in prevented
    assert str(EXIT_FAILED_PASSES) not in prevented


def test_the_unit_gives_the_drain_the_time_the_daemon_expects() -> None:
    unit = _directives(UNIT.read_text())
    assert _one(unit, "KillMode") == "mixed"  # SIGTERM to the daemon only; it stops its jobs
    assert _one(unit, "KillSignal") == "SIGTERM"
    stop = parse_duration(_one(unit, "TimeoutStopSec"))
    env = dict(v.split("=", 1) for v in unit[("Service", "Environment")])
    assert parse_duration(env["SCHEDULER_STOP_TIMEOUT"]) == stop
    assert DaemonSettings.drain_timeout + SHUTDOWN_MARGIN <= stop


def test_the_unit_runs_as_the_user_its_install_comment_creates() -> None:
    text = UNIT.read_text()
    unit = _directives(text)
    created = re.search(r"useradd --system .* (\S+)$", text, re.M)
    assert created, "the install comment no longer shows the useradd line"
    assert _one(unit, "User") == _one(unit, "Group") == created[1]


def test_systemd_analyze_verifies_the_unit_with_this_checkouts_entry_point(tmp_path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip(
            "systemd-analyze is not installed (Debian package systemd; .ci/run installs it)"
        )
    entry_point = Path(sys.executable).parent / "scheduler-daemon"
    assert entry_point.exists(), f"no entry point at {entry_point}: pip install -e . first"
    text, count = re.subn(
        r"^ExecStart=\S+", f"ExecStart={entry_point}", UNIT.read_text(), count=1, flags=re.M
    )
    assert count == 1
    copy = tmp_path / UNIT.name
    copy.write_text(text)
    result = subprocess.run(
        [analyze, "verify", str(copy)], check=False, capture_output=True, text=True, timeout=60
    )
    # verify exits 0 on unknown keys and unparsable values and only prints them: none may appear.
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout + result.stderr == "", result.stdout + result.stderr
