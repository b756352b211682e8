"""The endpoint under idle and slow clients, in a real daemon whose user may run few processes:
held connections cost it no threads (jobs still start), are closed after the read timeout, never
lock /healthz out, and a SIGTERM with them open still drains to exit 0; client errors are JSON
log events, never tracebacks.

RLIMIT_NPROC counts every thread of a user, and binds nobody running as root: the daemon runs as
an unused uid (`setpriv`), under `prlimit --nproc`, keeping only CAP_DAC_OVERRIDE so that it can
still reach an interpreter under a private home (pyenv in /root)."""

import json
import os
import pwd
import random
import selectors
import shlex
import shutil
import signal
import socket
import struct
import sys
import threading
import time
from pathlib import Path

import pytest

from scheduler_daemon.runtime import endpoint
from tests.support import free_port, http_get, query, wait_for

# An idle daemon is 10 tasks of its user (9 threads and the shell watchdog), a job one or two
# more. With a thread per connection, as the endpoint once had, 20 held connections take every
# task left under 30: the watchdog cannot fork a job (EAGAIN), nor the endpoint a thread for
# /healthz. Without, the daemon stays at 10 whatever is held.
NPROC = 30
IDLE = 40  # connections that send nothing
SLOW = 16  # connections that trickle a request head that never ends
TRICKLE_SECONDS = 0.5
READ_TIMEOUT_BOUND = 10.0  # the longest an operator may see a connection held without a request
CLOSE_MARGIN = 2.0  # the trickle, the poll and a loaded machine


def unused_uid() -> int:
    """A uid no account and no process has, so that RLIMIT_NPROC counts the daemon alone."""
    in_use = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            lines = status.read_text().splitlines()
        except OSError:
            continue
        in_use |= {int(line.split()[1]) for line in lines if line.startswith("Uid:")}
    while True:
        uid = random.SystemRandom().randrange(200_000, 300_000)
        try:
            pwd.getpwuid(uid)
        except KeyError:
            if uid not in in_use:
                return uid


def limited_python(directory: Path, uid: int) -> str:
    """An interpreter wrapper for DaemonProcess: this Python, as `uid`, under `--nproc NPROC`."""
    script = directory / "limited-python"
    script.write_text(
        "#!/bin/sh\n"
        f"exec prlimit --nproc={NPROC} setpriv --reuid={uid} --regid={uid} --clear-groups "
        "--inh-caps=+dac_override --ambient-caps=+dac_override "
        f'{shlex.quote(sys.executable)} "$@"\n'
    )
    script.chmod(0o755)
    return str(script)


class Slowloris(threading.Thread):
    """Holds IDLE connections that send nothing and SLOW ones that send a byte of header every
    TRICKLE_SECONDS, in waves: the next wave opens once the server closed every socket of the
    last, until the test stops it or the server is gone. `lifetimes[w]` says how long each
    socket of wave w stayed open until the server closed it."""

    def __init__(self, port: int) -> None:
        super().__init__(name="slowloris", daemon=True)
        self.port = port
        self.stopping = threading.Event()
        self.opened = 0
        self.held = 0  # open now
        self.waves = 0  # completed: every socket closed by the server
        self.lifetimes: list[list[tuple[str, float]]] = []

    def run(self) -> None:
        while not self.stopping.is_set():
            self.lifetimes.append([])
            with selectors.DefaultSelector() as selector:
                try:
                    self._open(selector)
                except ConnectionRefusedError:  # the daemon is gone
                    self.stopping.set()
                if self._hold(selector):
                    self.waves += 1

    def _open(self, selector: selectors.BaseSelector) -> None:
        for n in range(IDLE + SLOW):
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            kind = "idle" if n < IDLE else "slow"
            if kind == "slow":
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\nX-Slow: ")
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ, (kind, time.monotonic()))
            self.opened += 1

    def _hold(self, selector: selectors.BaseSelector) -> bool:
        """Until the server closed every socket (True) or the test stops (False)."""
        trickle_at = time.monotonic() + TRICKLE_SECONDS
        while selector.get_map():
            self.held = len(selector.get_map())
            if self.stopping.is_set():
                for key in list(selector.get_map().values()):
                    selector.unregister(key.fileobj)
                    key.fileobj.close()  # type: ignore[union-attr]
                return False
            for key, _ in selector.select(0.05):
                self._read(selector, key)
            if time.monotonic() >= trickle_at:
                trickle_at += TRICKLE_SECONDS
                for key in list(selector.get_map().values()):
                    if key.data[0] == "slow":
                        try:
                            key.fileobj.send(b"s")  # type: ignore[union-attr]
                        except OSError:
                            self._closed(selector, key)
        self.held = 0
        return True

    def _read(self, selector: selectors.BaseSelector, key: selectors.SelectorKey) -> None:
        try:
            data = key.fileobj.recv(4096)  # type: ignore[union-attr]
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._closed(selector, key)

    def _closed(self, selector: selectors.BaseSelector, key: selectors.SelectorKey) -> None:
        kind, opened = key.data
        self.lifetimes[-1].append((kind, time.monotonic() - opened))
        selector.unregister(key.fileobj)
        key.fileobj.close()  # type: ignore[union-attr]


def threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def exchange(port: int, request: bytes, *, reset: bool = False) -> bytes:
    """Sends `request` on a connection of its own; the answer, or b"" after a reset (RST)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return b""
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
        return b"".join(chunks)


def test_the_operations_guide_quotes_the_endpoints_limits() -> None:
    text = " ".join((Path(__file__).parents[2] / "docs" / "operations.md").read_text().split())
    assert endpoint.READ_TIMEOUT_SECONDS <= READ_TIMEOUT_BOUND
    assert f"A client has {endpoint.READ_TIMEOUT_SECONDS:g} s to send" in text
    assert f"At most {endpoint.MAX_CONNECTIONS} connections wait" in text


@pytest.mark.slow
@pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("prlimit") and shutil.which("setpriv")),
    reason="needs root, prlimit and setpriv: RLIMIT_NPROC binds only another user",
)
def test_held_connections_starve_neither_jobs_nor_healthz_and_a_sigterm_still_drains(
    database_url, cli, spawn, tmp_path: Path
) -> None:
    cli("tasks", "add", "tick", "--every", "1s", "--command", "true")
    port = free_port()
    python = limited_python(tmp_path, unused_uid())
    daemon = spawn(database_url, "limited", "--http-port", str(port), python=python)
    daemon.instance_id()

    def successes() -> int:
        sql = "SELECT count(*) AS n FROM run WHERE status = 'success'"
        return int(query(database_url, sql)[0]["n"])

    wait_for(lambda: successes() >= 1, message="a first job, before any connection is held")
    assert http_get(port, "/readyz") == (200, "ready\n")
    assert http_get(port, "/metrics")[0] == 200
    idle_threads = threads_of(daemon.pid)

    slowloris = Slowloris(port)
    slowloris.start()
    try:
        wait_for(lambda: slowloris.opened >= IDLE + SLOW, message="the connections to open")
        assert http_get(port, "/healthz") == (200, "ok\n")
        before = successes()
        wait_for(
            lambda: successes() >= before + 3,
            timeout=20,
            message="jobs to start while the connections are held",
        )
        assert http_get(port, "/healthz") == (200, "ok\n")
        assert threads_of(daemon.pid) <= idle_threads + 1, "a connection cost the daemon a thread"
        wait_for(
            lambda: slowloris.waves >= 2,
            timeout=2 * (READ_TIMEOUT_BOUND + CLOSE_MARGIN) + 5,
            message="the daemon to close two waves of held connections",
        )
        for wave in slowloris.lifetimes[:2]:
            # Past the cap, the oldest waiting connections are closed at once; the others,
            # trickling or not, when the read timeout passes.
            assert len(wave) == IDLE + SLOW
            at_once = [kind for kind, lifetime in wave if lifetime < 1.0]
            assert len(at_once) >= IDLE + SLOW - endpoint.MAX_CONNECTIONS, wave
            assert max(lifetime for _, lifetime in wave) <= READ_TIMEOUT_BOUND + CLOSE_MARGIN, wave
            assert min(life for kind, life in wave if kind == "slow") >= 1.0, wave

        # Client errors: a request line that is not HTTP, and a client that resets.
        assert exchange(port, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        exchange(port, b"GET /heal", reset=True)
        assert http_get(port, "/healthz") == (200, "ok\n")

        wait_for(lambda: slowloris.held >= SLOW, message="a wave held at the SIGTERM")
        daemon.signal(signal.SIGTERM)
        assert daemon.proc.wait(30) == 0, daemon.log()
    finally:
        slowloris.stopping.set()
        slowloris.join(10)
    unfinished = "SELECT id, status, error FROM run WHERE status <> 'success'"
    assert query(database_url, unfinished) == []

    log = daemon.log()
    assert "Traceback" not in log, log
    assert [line for line in log.splitlines() if not line.startswith("{")] == [], log
    reasons = {
        event.get("reason")
        for event in map(json.loads, log.splitlines())
        if event["event"] == "endpoint_client_error"
    }
    assert {"timeout", "over_cap", "bad_request", "reset"} <= reasons, reasons
