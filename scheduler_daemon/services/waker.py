"""Waker: LISTENs for wake-up notifications on a direct connection and sets the loop's event. A
failed session is reported and tried again with back-off; a dead thread is restarted by the
daemon (`restart`), which polls meanwhile (ADR 0005)."""

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime
from typing import Any

import psycopg
import structlog

from scheduler_daemon.lifecycle import Backoff, ThreadedService
from scheduler_daemon.storage import instance_store
from scheduler_daemon.storage.database import Configure, connect

log = structlog.get_logger()
PROBE = "probe"
"""The wake-up reason a waker sends itself after each LISTEN; every listener ignores it."""
PROBE_SECONDS = 1.0
"""How long a waker waits for its own probe before it concludes that LISTEN cannot work here."""
RETRY_SECONDS = (1.0, 5.0)
"""After a failed session the waker listens again after the first, doubling up to the second
(short: after an outage the daemon should hear wake-ups again soon)."""


@dataclass(eq=False)
class Waker(ThreadedService):
    """New tasks, manual triggers, retries and freed budget wake idle daemons at once. Polling
    still covers everything, so behind PgBouncer in transaction mode (`--no-listen`) only the
    latency changes. A waker that never started (`--no-listen`) has nothing to stop."""

    url: str
    wake: threading.Event
    _: KW_ONLY
    instance_id: str
    # A new task: its due time (or None when the wake-up carries none) goes to the loop, which
    # sleeps until then. Any other wake-up (queued, retry, finished, triggered, cancelled) means
    # there may be something to claim.
    on_task_added: Callable[[datetime | None], None] | None = None
    launch_wanted: threading.Event | None = None
    on_failure: Callable[[Exception], None] = lambda _exc: None  # each failed session, counted
    configure: Configure | None = None  # run on each new connection first (the epoch's sighting)
    _gave_up: bool = field(default=False, init=False)  # LISTEN cannot work here: polling

    def __post_init__(self) -> None:
        super().__init__("waker")

    @property
    def alive(self) -> bool:
        """False once a started thread died (not when it was stopped, or gave up on LISTEN)."""
        return super().alive or self._gave_up

    def _run(self) -> None:
        backoff = Backoff(*RETRY_SECONDS)
        while not self.stop_requested.is_set():
            listening = False
            try:
                with connect(self.url, autocommit=True, configure=self.configure) as conn:
                    instance_store.listen_wakeups(conn)
                    if not self._probe(conn):
                        self._give_up(conn)
                        return
                    listening = True
                    self._listen(conn)
            except Exception as exc:
                log.debug("listen_failed", error=str(exc), instance_id=self.instance_id)
                self.on_failure(exc)
                if listening:  # the session worked for a while: not a failing streak
                    backoff.reset()
                self.stop_requested.wait(backoff.next())

    def _probe(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether a wake-up this waker sends itself, from a connection of its own as a peer
        would, comes back within PROBE_SECONDS. Through PgBouncer in transaction mode it never
        does: the LISTEN ran on whichever server connection was lent for that one statement,
        and nothing links the waker to it again. (Sent on the listening connection itself it
        would come back through a pooler too, on the server connection just lent.) Other
        wake-ups heard meanwhile count as usual."""
        token = f"{PROBE} {self.instance_id} {secrets.token_hex(4)}"
        with connect(self.url, autocommit=True, configure=self.configure) as other:
            instance_store.notify_wakeup(other, token)
        deadline = time.monotonic() + PROBE_SECONDS
        while (left := deadline - time.monotonic()) > 0 and not self.stop_requested.is_set():
            for notify in conn.notifies(timeout=left, stop_after=1):
                if notify.payload == token:
                    return True
                self.heard(notify.payload)
        return self.stop_requested.is_set()

    def _give_up(self, conn: psycopg.Connection[Any]) -> None:
        """LISTEN cannot work on this connection: say so once, take the LISTEN back, and leave
        the loop to its polling (every --poll-interval)."""
        log.warning(
            "listen_unavailable",
            hint="no wake-up came back within 1 s (PgBouncer in transaction mode?); polling "
            "instead. Set --no-listen (SCHEDULER_LISTEN=false) behind a transaction pooler",
            instance_id=self.instance_id,
        )
        self._gave_up = True
        instance_store.unlisten_wakeups(conn)

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        while not self.stop_requested.is_set():
            for notify in conn.notifies(timeout=1.0, stop_after=1):
                self.heard(notify.payload)

    def heard(self, payload: str) -> None:
        """One wake-up: what it says is recorded before the loop is woken, so the woken pass
        sees it."""
        reason = payload.partition(" ")[0]
        if reason == PROBE:
            return  # a waker checking its own LISTEN
        if reason == instance_store.TASK_ADDED:
            if self.on_task_added is not None:
                self.on_task_added(instance_store.task_added_due(payload))
        elif self.launch_wanted is not None:
            self.launch_wanted.set()
        self.wake.set()
