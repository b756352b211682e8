"""A real daemon speaks the systemd notify protocol to a datagram socket the test binds: STATUS
while the database is down at start, READY only once registered, WATCHDOG from the loop,
STOPPING at the drain; and its jobs never see the socket."""

import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler_daemon.storage import migration
from tests.support import query, wait_for

pytestmark = pytest.mark.slow
WATCHDOG_USEC = str(120 * 1_000_000)  # the unit's WatchdogSec=120s


class NotifySocket:
    """The service manager's end: collects every datagram, one message per datagram."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.setblocking(False)
        self.messages: list[dict[str, str]] = []

    def received(self) -> list[dict[str, str]]:
        while True:
            try:
                data = self.sock.recv(4096)
            except BlockingIOError:
                return self.messages
            self.messages.append(dict(line.split("=", 1) for line in data.decode().splitlines()))

    def wait(self, key: str, value: str | None = None, after: int = 0) -> int:
        """Index of the first message from `after` on that sets `key` (to `value`)."""

        def found() -> int | None:
            for i, message in enumerate(self.received()[after:], after):
                if key in message and value in (None, message[key]):
                    return i + 1  # truthy even for the first message
            return None

        return wait_for(found, message=f"{key}={value or '…'}") - 1


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: AF_UNIX socket paths are limited to 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="sdn-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_notify_protocol_through_a_start_without_database_a_run_and_a_drain(
    spawn, owned_server, cli, short_dir: Path
) -> None:
    manager = NotifySocket(str(short_dir / "notify"))
    env = {"NOTIFY_SOCKET": str(short_dir / "notify"), "WATCHDOG_USEC": WATCHDOG_USEC}
    daemon = spawn(owned_server.url, "notified", env=env)

    waiting = manager.wait("STATUS")
    assert manager.messages[waiting]["STATUS"].startswith("waiting for the database (retry in")
    manager.wait("WATCHDOG", "1")  # waiting for the database is progress too
    assert not any("READY" in m for m in manager.received())

    owned_server.start()
    migration.upgrade(owned_server.url)
    ready = manager.wait("READY", "1")
    assert query(owned_server.url, "SELECT 1 FROM instance")  # READY came after registration
    assert manager.messages[ready]["STATUS"].startswith("ready: instance notified-")
    status = manager.wait("STATUS", after=ready + 1)
    assert manager.messages[status]["STATUS"] == (
        "ready: queue depth 0, executing 0/16 fleet-wide, 0/4 slots here"
    )
    pings = manager.wait("WATCHDOG", "1", after=ready + 1)
    manager.wait("WATCHDOG", "1", after=pings + 1)  # again: the loop keeps pinging

    url = owned_server.url
    cli("tasks", "add", "env", "--every", "1h", "--command", "env", url=url)
    cli("tasks", "trigger", "env", url=url)
    (run,) = wait_for(
        lambda: query(url, "SELECT output_tail FROM run WHERE status = 'success'"),
        message="the env job",
    )
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        assert name not in run["output_tail"]

    daemon.signal(signal.SIGTERM)
    stopping = manager.wait("STOPPING", "1")
    assert manager.messages[stopping]["STATUS"] == "draining: 0 run(s) to finish"
    assert daemon.proc.wait(30) == 0, daemon.log()


def test_an_abstract_notify_socket_gets_ready_and_stopping(spawn, database_url) -> None:
    name = f"scheduler-daemon-test-{database_url.rsplit('/', 1)[1]}"
    manager = NotifySocket("\0" + name)
    daemon = spawn(database_url, "abstract", env={"NOTIFY_SOCKET": "@" + name})
    manager.wait("READY", "1")
    daemon.signal(signal.SIGTERM)
    manager.wait("STOPPING", "1")
    assert daemon.proc.wait(30) == 0, daemon.log()
    assert not any("WATCHDOG" in m for m in manager.received())  # no WATCHDOG_USEC: no pings


def test_a_watchdog_shorter_than_the_stall_bound_is_refused(cli, monkeypatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", str(30 * 1_000_000))
    result = cli("run")
    assert result.code == 2
    assert result.err == (
        "error: the systemd watchdog (30s, WatchdogSec=) must be longer than --poll-interval "
        "+ 90s (91s), the longest a healthy loop iteration takes\n"
    )
