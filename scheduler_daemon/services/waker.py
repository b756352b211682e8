"""Waker: LISTENs for wake-up notifications on a direct connection and sets the loop's event."""

import threading
from collections.abc import Callable
from datetime import datetime
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

    def __init__(
        self,
        url: str,
        wake: threading.Event,
        *,
        instance_id: str,
        on_task_added: Callable[[datetime | None], None] | None = None,
        launch_wanted: threading.Event | None = None,
    ) -> None:
        self.url = url
        self.wake = wake
        # A new task: its due time (or None when the wake-up carries none) goes to the loop,
        # which sleeps until then. Any other wake-up (queued, retry, finished, triggered,
        # cancelled) means there may be something to claim.
        self.on_task_added = on_task_added
        self.launch_wanted = launch_wanted
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
            for notify in conn.notifies(timeout=1.0, stop_after=1):
                self.heard(notify.payload)

    def heard(self, payload: str) -> None:
        """One wake-up: what it says is recorded before the loop is woken, so the woken pass
        sees it."""
        if payload.partition(" ")[0] == instance_store.TASK_ADDED:
            if self.on_task_added is not None:
                self.on_task_added(instance_store.task_added_due(payload))
        elif self.launch_wanted is not None:
            self.launch_wanted.set()
        self.wake.set()
