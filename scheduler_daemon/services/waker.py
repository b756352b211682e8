"""Waker: LISTENs for wake-up notifications on a direct connection and sets the loop's event."""

import threading
from typing import Any

import psycopg
import structlog

from scheduler_daemon.storage import instance_store
from scheduler_daemon.storage.database import connect

log = structlog.get_logger()


class Waker:
    """New tasks, manual triggers, retries and freed budget wake idle daemons at once. Polling
    still covers everything, so behind PgBouncer in transaction mode (`--no-listen`) only the
    latency changes."""

    def __init__(self, url: str, wake: threading.Event, *, instance_id: str) -> None:
        self.url = url
        self.wake = wake
        self.instance_id = instance_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="waker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stops listening; a waker that never started (`--no-listen`) has nothing to stop."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                with connect(self.url, autocommit=True) as conn:
                    instance_store.listen_wakeups(conn)
                    self._listen(conn)
            except Exception as exc:
                log.debug("listen_failed", error=str(exc), instance_id=self.instance_id)
                self._stop.wait(5)

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        while not self._stop.is_set():
            for _ in conn.notifies(timeout=1.0, stop_after=1):
                self.wake.set()
