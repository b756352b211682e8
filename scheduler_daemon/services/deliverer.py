"""Deliverer: POSTs the notification outbox's due rows, one claim, one POST, one record each, on
a thread and a connection of its own, so a slow or failing receiver never delays a claim or a
job (ADR 0016).

A row is claimed in a short transaction (`outbox_claim`, SKIP LOCKED) that moves its next
attempt a lease ahead and counts the attempt; the POST goes out with no transaction open and a
timeout shorter than the lease; the result is recorded in another short transaction fenced on
that attempt (`outbox_delivered`, `outbox_failed` with the backoff). A daemon that dies between
the POST and its record leaves the row to be claimed again when the lease passes, by any
daemon: the receiver gets it again, with the same `delivery_id` (at least once). A dead thread
is restarted by the daemon (`restart`), as the waker's (ADR 0005).
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon.domain.notification import Notification, backoff
from scheduler_daemon.executors.http import post_json
from scheduler_daemon.storage import outbox_store
from scheduler_daemon.storage.database import transaction

log = structlog.get_logger()
POST_TIMEOUT_SECONDS = 10.0
# The claim's lease: the POST's timeout and room for its record. A row whose deliverer died is
# POSTed again this long after its claim.
LEASE = timedelta(seconds=POST_TIMEOUT_SECONDS + 5)
IDLE_SECONDS = 1.0  # the wait between passes that found nothing due
PASS_LIMIT = 100  # rows per pass at most, so a stop is seen between passes


@dataclass
class DeliveryResult:
    delivered: int = 0
    failed: int = 0  # POSTs that failed (recorded with a backoff)
    fenced: int = 0  # records refused: a later claim held the row


class Deliverer:
    """At-least-once delivery of the outbox; each row's POSTs carry its `delivery_id` (a JSON
    field and the `Idempotency-Key` header)."""

    def __init__(
        self,
        pool: ConnectionPool,
        *,
        instance_id: str,
        timeout: float = POST_TIMEOUT_SECONDS,
        lease: timedelta = LEASE,
        first_backoff: timedelta | None = None,
        on_failure: Callable[[Exception], None] = lambda _exc: None,
        on_post_failure: Callable[[], None] = lambda: None,
        after_post: Callable[[Notification], None] | None = None,
    ) -> None:
        self.pool = pool  # its own: the loop's connections never wait behind a POST's record
        self.instance_id = instance_id
        self.timeout = timeout
        self.lease = lease
        self.first_backoff = first_backoff
        self.on_failure = on_failure  # a failed pass (the database), counted by the daemon
        self.on_post_failure = on_post_failure  # a failed POST, counted by the daemon
        self.after_post = after_post  # a test's injection point: between a POST and its record
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="deliverer", daemon=True)

    def run_once(self, limit: int = PASS_LIMIT) -> DeliveryResult:
        """Delivers due rows, one at a time, until none is due or `limit` were tried."""
        result = DeliveryResult()
        for _ in range(limit):
            if self._stop.is_set():
                break
            with transaction(self.pool) as tx:
                notification = outbox_store.claim(tx.conn, lease=self.lease)
            if notification is None:
                break
            self._deliver(notification, result)
        return result

    def _deliver(self, notification: Notification, result: DeliveryResult) -> None:
        ids = {
            "occurrence_id": notification.occurrence_id,
            "task_id": notification.task_id,
            "delivery_id": notification.delivery_id,
            "instance_id": self.instance_id,
        }
        headers = {**notification.headers, "Idempotency-Key": notification.delivery_id}
        if notification.url is None:
            error: str | None = "no notify URL (the task's and the fleet's were removed)"
        else:
            error = post_json(notification.url, notification.body(), headers, timeout=self.timeout)
        if self.after_post is not None:
            self.after_post(notification)
        with transaction(self.pool) as tx:
            if error is None:
                recorded = outbox_store.delivered(tx.conn, notification)
            else:
                first = {} if self.first_backoff is None else {"first": self.first_backoff}
                delay = backoff(notification.attempts, **first)
                recorded = outbox_store.failed(tx.conn, notification, error=error, delay=delay)
        if error is not None:
            result.failed += 1
            self.on_post_failure()
            log.warning(
                "notification_failed",
                notify_event=notification.event,
                attempt=notification.attempts,
                error=error,
                **ids,
            )
        else:
            result.delivered += 1
            log.info("notification_delivered", notify_event=notification.event, **ids)
        if not recorded:
            result.fenced += 1
            log.warning("notification_fenced", attempt=notification.attempts, **ids)

    # -- the thread ---------------------------------------------------------------------------
    def start(self) -> None:
        self.pool.open(wait=False)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """False once a started thread died (not when it was stopped)."""
        return self._thread.ident is None or self._thread.is_alive() or self._stop.is_set()

    def restart(self) -> None:
        """A new thread in place of a dead one."""
        if self._thread.is_alive() or self._stop.is_set():
            return
        self._thread = threading.Thread(target=self._loop, name="deliverer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops after the POST in flight (at most its timeout) and closes its connection."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=self.timeout + 5)
        self.pool.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                result = self.run_once()
            except Exception as exc:  # the database, mostly: counted, the next pass tries again
                log.warning("delivery_pass_failed", error=str(exc), instance_id=self.instance_id)
                self.on_failure(exc)
                self._stop.wait(IDLE_SECONDS)
                continue
            if not (result.delivered or result.failed or result.fenced):
                self._stop.wait(IDLE_SECONDS)
