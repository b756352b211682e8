"""The systemd notify protocol, spoken by hand: one datagram of `KEY=value` lines per message over
an AF_UNIX SOCK_DGRAM socket named by $NOTIFY_SOCKET (a path, or `@name` for an abstract socket).

What the daemon reports, and when (deploy/systemd/scheduler-daemon.service relies on it):

- `READY=1` once the daemon can take work: the schema is at this build's revision and its instance
  row is registered. While the database is unreachable at start it keeps retrying and is *not*
  ready; it says why in `STATUS=` lines instead. So `systemctl start`, units ordered `After=` it,
  and a rolling restart that waits for each host, wait for a replica that really works; the unit
  has `TimeoutStartSec=infinity` because a slow database must not turn into a failed start and a
  restart loop that would only wait the same way. (The other way, READY at once, would let a
  rollout replace every replica while none can reach the database.)
- `STOPPING=1` when the drain starts (SIGTERM, or the loop giving up after failed passes).
- `WATCHDOG=1` from the loop whenever an iteration completes, whatever the database said, when
  $WATCHDOG_USEC is set: like /healthz it reports progress, not database health, so an outage
  never gets the daemon killed while it keeps outcomes in memory. At most once a second (the
  watchdog interval is always longer than the 90 s stall bound: settings checks it).
- `STATUS=` with the queue depth and budget after each fleet sample, and what the drain waits for.

The variables are removed from the environment when read, so jobs never inherit the socket
(sd_notify's `unset_environment`). Sending never fails the daemon: an error is logged at debug.
"""

import os
import socket
import time
from collections.abc import Callable, MutableMapping
from datetime import timedelta

import structlog

log = structlog.get_logger()
VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
PING_INTERVAL_SECONDS = 1.0  # a loop that iterates every 20 ms must not flood the manager


def socket_address(name: str) -> str:
    """$NOTIFY_SOCKET as an AF_UNIX address: a leading `@` names an abstract socket."""
    return "\0" + name[1:] if name.startswith("@") else name


class Notifier:
    """Sends state changes to the service manager; does nothing outside systemd."""

    def __init__(
        self,
        address: str | None,
        watchdog: timedelta | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.address = address
        self.watchdog = watchdog
        self._clock = clock
        self._last_ping = float("-inf")
        self._socket: socket.socket | None = None

    @classmethod
    def from_environment(cls, env: MutableMapping[str, str] | None = None) -> "Notifier":
        """Reads and removes NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID. The watchdog is ours
        when WATCHDOG_PID is unset or names this process."""
        env = os.environ if env is None else env
        found = {name: env.pop(name, None) for name in VARIABLES}
        address = socket_address(found["NOTIFY_SOCKET"]) if found["NOTIFY_SOCKET"] else None
        watchdog = None
        usec, pid = found["WATCHDOG_USEC"], found["WATCHDOG_PID"]
        if usec and usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            watchdog = timedelta(microseconds=int(usec))
        return cls(address, watchdog)

    def send(self, *fields: str) -> bool:
        """One datagram with `fields`, one per line; False when it could not be sent."""
        if self.address is None:
            return False
        try:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._socket.setblocking(False)
            self._socket.sendto("\n".join(fields).encode(), self.address)
        except OSError as exc:
            log.debug("notify_failed", error=str(exc))
            return False
        return True

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}")

    def stopping(self, status: str) -> None:
        self.send("STOPPING=1", f"STATUS={status}")

    def status(self, text: str) -> None:
        self.send(f"STATUS={text}")

    def progress(self) -> None:
        """The loop completed an iteration: ping the watchdog (at most once a second)."""
        if self.watchdog is None:
            return
        now = self._clock()
        if now - self._last_ping >= PING_INTERVAL_SECONDS:
            self._last_ping = now
            self.send("WATCHDOG=1")

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
