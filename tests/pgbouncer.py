"""A PgBouncer in transaction pooling mode that the test owns, in front of the test server.

Debian's `pgbouncer` binary with an ini and an auth file of its own, listening on a free loopback
port only. PgBouncer refuses to run as root, so as root it runs as `postgres` (or `nobody`).
"""

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.support import wait_for

POOL_SIZE = 6  # server connections per (database, user): enough for two daemons and the CLI


def find_pgbouncer() -> str | None:
    return shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
    )


def running_bouncer(server_url: str) -> Iterator["PgBouncer"]:
    """The body of a `bouncer` fixture: a PgBouncer in front of `server_url`, stopped at the
    end; skipped where no pgbouncer is installed."""
    binary = find_pgbouncer()
    if binary is None:
        pytest.skip("no pgbouncer here (Debian package pgbouncer, which .ci/run installs)")
    bouncer = PgBouncer(binary, server_url).start()
    yield bouncer
    bouncer.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _quote_auth(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


class PgBouncer:
    def __init__(self, binary: str, server_url: str) -> None:
        self.binary = binary
        self.server = conninfo_to_dict(server_url)
        self.user = str(self.server.get("user") or "postgres")
        # The server's own password when it has one (PgBouncer logs in with it), else any.
        self.password = str(self.server.get("password") or uuid.uuid4().hex)
        self.port = _free_port()
        # Readable by the unprivileged user PgBouncer runs as; nothing here is a real secret.
        self.dir = Path(tempfile.mkdtemp(prefix="scheduler-daemon-pgbouncer-"))
        self.dir.chmod(0o755)
        self.log_path = self.dir / "pgbouncer.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def _write_config(self) -> Path:
        host = self.server.get("host") or "127.0.0.1"
        target = f"host={host} port={self.server.get('port') or 5432}"
        auth = self.dir / "userlist.txt"
        auth.write_text(f"{_quote_auth(self.user)} {_quote_auth(self.password)}\n")
        ini = self.dir / "pgbouncer.ini"
        ini.write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = {target}",  # every test database, logged in as the client's user
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    "pool_mode = transaction",
                    "auth_type = scram-sha-256",
                    f"auth_file = {auth}",
                    f"default_pool_size = {POOL_SIZE}",
                    "max_client_conn = 200",
                    "server_login_retry = 1",
                    "",
                ]
            )
        )
        for path in (auth, ini):
            path.chmod(0o644)
        return ini

    def start(self) -> "PgBouncer":
        ini = self._write_config()
        argv = [self.binary, str(ini)]
        if os.geteuid() == 0:
            argv[1:1] = ["-u", self._run_as()]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
        wait_for(self._answers, timeout=30, message=f"pgbouncer on port {self.port}")
        return self

    def _run_as(self) -> str:
        """The unprivileged user PgBouncer runs as (it refuses to run as root): the owner of the
        server's socket directory when the server is reached through one (the embedded
        server's is private to its own user), else postgres, else nobody."""
        host = str(self.server.get("host") or "")
        if host.startswith("/"):
            return pwd.getpwuid(os.stat(host).st_uid).pw_name
        return "postgres" if _user_exists("postgres") else "nobody"

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"pgbouncer exited {self.proc.returncode}: {self.log()}")
        try:
            psycopg.connect(self.url_for("postgresql:///postgres"), connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True

    def url_for(self, database_url: str) -> str:
        """`database_url`'s database through this PgBouncer, as the server URL's user."""
        name = urlsplit(database_url).path.lstrip("/") or "postgres"
        netloc = f"{quote(self.user)}:{quote(self.password)}@127.0.0.1:{self.port}"
        return urlunsplit(("postgresql", netloc, "/" + name, "", ""))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
