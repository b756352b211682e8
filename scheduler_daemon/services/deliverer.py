"""Deliverer: POSTs the notification outbox's due rows, one claim, one POST, one record each, up
to IN_FLIGHT at once on worker threads of its own (at most PER_URL to one URL), over a connection
of its own, so a slow or failing receiver never delays a claim, a job, or the other
notifications (ADR 0016).

A row is claimed in a short transaction (`outbox_claim`, SKIP LOCKED) that moves its next
attempt a lease ahead and counts the attempt, when a worker is free; the POST goes out with no
transaction open and a total deadline shorter than the lease (`executors/webhook.py`); the
result is recorded in another short transaction fenced on that attempt (`outbox_delivered`,
`outbox_failed` with the backoff). A record that fails (the database refused it) is replaced by
a failed one carrying why, so the row waits its back-off with its error visible: one row never
fails a pass. A daemon that dies between the POST and its record leaves the row to be claimed
again when the lease passes, by any daemon: the receiver gets it again, with the same
`delivery_id` (at least once). A dead thread is restarted by the daemon (`restart`), as the
waker's (ADR 0005).
"""

import queue
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import timedelta

import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon.domain.notification import Notification, backoff
from scheduler_daemon.domain.storable import storable_error
from scheduler_daemon.executors.webhook import post_json
from scheduler_daemon.executors.wire import error_line
from scheduler_daemon.lifecycle import ThreadedService, left
from scheduler_daemon.storage import outbox_store
from scheduler_daemon.storage.database import Conn, transaction

log = structlog.get_logger()
POST_TIMEOUT_SECONDS = 10.0  # the whole POST: connect, send and the answer
# The claim's lease: the POST's deadline and room for its record. A row whose deliverer died is
# POSTed again this long after its claim.
LEASE = timedelta(seconds=POST_TIMEOUT_SECONDS + 5)
IDLE_SECONDS = 1.0  # the wait between passes that found nothing due
PASS_LIMIT = 100  # rows per pass at most, so a stop is seen between passes
IN_FLIGHT = 4  # POSTs at once per daemon
# POSTs at once to one URL: a slow receiver holds at most this many workers, never all of them.
PER_URL = IN_FLIGHT - 1
SLOT_WAIT_SECONDS = 0.2  # how often a pass waiting for a free worker looks at the stop
RECORD_GRACE_SECONDS = 5.0  # a stop waits this long past a POST's deadline for its record

DELIVERED, FAILED, FENCED, UNRECORDED = "delivered", "failed", "fenced", "unrecorded"


@dataclass
class DeliveryResult:
    delivered: int = 0
    failed: int = 0  # POSTs that failed (recorded with a backoff)
    fenced: int = 0  # records refused: a later claim held the row
    unrecorded: int = 0  # no record could be written at all: the lease brings the row back

    def add(self, outcome: str) -> None:
        setattr(self, outcome, getattr(self, outcome) + 1)


Work = tuple[Notification, "Future[str]"]


class Deliverer(ThreadedService):
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
        in_flight: int = IN_FLIGHT,
        per_url: int = PER_URL,
        on_failure: Callable[[Exception], None] = lambda _exc: None,
        on_post_failure: Callable[[], None] = lambda: None,
        after_post: Callable[[Notification], None] | None = None,
    ) -> None:
        self.pool = pool  # its own: the loop's connections never wait behind a POST's record
        self.instance_id = instance_id
        self.timeout = timeout
        self.lease = lease
        self.first_backoff = first_backoff
        self.on_failure = on_failure  # a failed pass or record (the database), counted
        self.on_post_failure = on_post_failure  # a failed POST, counted by the daemon
        self.after_post = after_post  # a test's injection point: between a POST and its record
        super().__init__("deliverer")
        # A stop waits for the POSTs in flight (each ends within its deadline) and their records.
        self.stop_timeout = timeout + RECORD_GRACE_SECONDS
        self._slots = threading.BoundedSemaphore(in_flight)
        self._work: queue.SimpleQueue[Work | None] = queue.SimpleQueue()
        self._workers = [
            threading.Thread(target=self._serve, name=f"deliverer-post-{n}", daemon=True)
            for n in range(in_flight)
        ]
        self._workers_lock = threading.Lock()
        self.per_url = max(1, min(per_url, in_flight))
        self._busy: Counter[str] = Counter()  # URLs of the POSTs in flight, under _workers_lock

    def run_once(self, limit: int = PASS_LIMIT) -> DeliveryResult:
        """Delivers due rows, up to IN_FLIGHT at once, until none is due or `limit` were
        claimed; returns once each claimed row was POSTed and recorded."""
        futures = self._feed(limit)
        result = DeliveryResult()
        for future in futures:
            result.add(future.result())
        return result

    def _feed(self, limit: int) -> list["Future[str]"]:
        """Claims due rows one by one, each once a worker is free, and hands it to that
        worker; returns their outcomes to come."""
        self._start_workers()
        futures: list[Future[str]] = []
        while len(futures) < limit and not self.stop_requested.is_set():
            if not self._slots.acquire(timeout=SLOT_WAIT_SECONDS):
                continue
            with self._workers_lock:
                full = [url for url, n in self._busy.items() if n >= self.per_url]
            try:
                with transaction(self.pool) as tx:
                    notification = outbox_store.claim(tx.conn, lease=self.lease, full=full)
            except BaseException:
                self._slots.release()
                raise
            if notification is None:
                self._slots.release()
                break
            self._hold(notification.url, +1)
            future: Future[str] = Future()
            self._work.put((notification, future))
            futures.append(future)
        return futures

    def _serve(self) -> None:
        """A worker: delivers what it is handed until told to stop (None)."""
        while (work := self._work.get()) is not None:
            notification, future = work
            try:
                future.set_result(self._deliver(notification))
            except Exception:  # never expected: _deliver records its own failures
                log.exception("delivery_crashed", instance_id=self.instance_id)
                future.set_result(UNRECORDED)
            finally:
                self._hold(notification.url, -1)
                self._slots.release()

    def _deliver(self, notification: Notification) -> str:
        """POSTs one claimed row and records the result; returns the outcome."""
        ids = _ids(notification, self.instance_id)
        try:
            error = self._post(notification)
        except Exception as exc:  # the row's own problem (its body, its URL), not the pass's
            error = f"not sent: {error_line(exc)}"
        if self.after_post is not None:
            self.after_post(notification)
        outcome = self._record(notification, error, ids)
        if error is not None:
            self.on_post_failure()
            log.warning(
                "notification_failed",
                notify_event=notification.event,
                attempt=notification.attempts,
                error=storable_error(error),
                **ids,
            )
        elif outcome == DELIVERED:
            log.info("notification_delivered", notify_event=notification.event, **ids)
        if outcome == FENCED:
            log.warning("notification_fenced", attempt=notification.attempts, **ids)
        return outcome

    def _post(self, notification: Notification) -> str | None:
        if notification.problem is not None:
            return notification.problem
        if notification.url is None:
            return "no notify URL (the task's and the fleet's were removed)"
        headers = {**notification.headers, "Idempotency-Key": notification.delivery_id}
        return post_json(notification.url, notification.body(), headers, timeout=self.timeout)

    def _record(self, notification: Notification, error: str | None, ids: dict[str, object]) -> str:
        """Records the POST's result, fenced on its claim. When the database refuses that
        record, a failed one saying why takes its place: the row waits its back-off, its error
        shown, instead of coming back with every lease."""
        try:
            with transaction(self.pool) as tx:
                if error is None:
                    recorded = outbox_store.delivered(tx.conn, notification)
                else:
                    recorded = self._failed(tx.conn, notification, error)
        except Exception as exc:
            log.warning("notification_record_failed", error=error_line(exc), **ids)
            self.on_failure(exc)
            why = f"{error or 'delivered'}; its record failed: {error_line(exc)}"
            try:
                with transaction(self.pool) as tx:
                    recorded = self._failed(tx.conn, notification, why)
            except Exception as again:  # the database itself: the lease brings the row back
                log.warning("notification_unrecorded", error=error_line(again), **ids)
                return UNRECORDED
            return FAILED if recorded else FENCED
        if not recorded:
            return FENCED
        return DELIVERED if error is None else FAILED

    def _failed(self, conn: Conn, notification: Notification, error: str) -> bool:
        first = {} if self.first_backoff is None else {"first": self.first_backoff}
        delay = backoff(notification.attempts, **first)
        stored = storable_error(error) or ""
        return outbox_store.failed(conn, notification, error=stored, delay=delay)

    def _hold(self, url: str | None, change: int) -> None:
        if url is None:
            return
        with self._workers_lock:
            self._busy[url] += change
            if self._busy[url] <= 0:
                del self._busy[url]

    # -- the threads --------------------------------------------------------------------------
    def start(self) -> None:
        self.pool.open(wait=False)
        super().start()

    def _start_workers(self) -> None:
        with self._workers_lock:
            for worker in self._workers:
                if worker.ident is None:
                    worker.start()

    def _stopped(self, deadline: float) -> None:
        """After the feeding thread: the workers finish their POSTs and records, then the
        connection closes."""
        for _ in self._workers:
            self._work.put(None)
        for worker in self._workers:
            if worker.ident is not None:
                worker.join(timeout=left(deadline))
        self.pool.close()

    def _run(self) -> None:
        while not self.stop_requested.is_set():
            try:
                claimed = self._feed(PASS_LIMIT)
            except Exception as exc:  # the database, mostly: counted, the next pass tries again
                log.warning("delivery_pass_failed", error=str(exc), instance_id=self.instance_id)
                self.on_failure(exc)
                self.stop_requested.wait(IDLE_SECONDS)
                continue
            if not claimed:
                self.stop_requested.wait(IDLE_SECONDS)


def _ids(notification: Notification, instance_id: str) -> dict[str, object]:
    return {
        "occurrence_id": notification.occurrence_id,
        "task_id": notification.task_id,
        "delivery_id": notification.delivery_id,
        "instance_id": instance_id,
    }
