"""The http executor: POSTs the run's identifiers as JSON to a URL, one daemon thread per request.

2xx is success; any other status (redirects are not followed) is failure; connection errors fail
the run with their message, secrets redacted. The task's headers are sent as given; a password in
the URL (`https://user:pw@host/`) becomes a Basic Authorization header, since urllib would
otherwise take it for part of the host and put it in its error message.

Timeout, stop() and the trust deadline decide the Outcome at once and abandon the request
thread, which ends on its own when its socket timeout passes. One timekeeper thread per executor
applies timeouts and deadlines so `wake` is set without anyone polling. The request thread sends
nothing for a job already over, or whose trust deadline has passed (`stopped`,
NOT_STARTED_ERROR, also the timekeeper's error for a request that never left): a daemon frozen
between its claim and the request must not call a webhook its lease's successor calls.
"""

import base64
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from http.client import HTTPResponse
from typing import Any

from scheduler_daemon.domain import limit
from scheduler_daemon.domain.secret import redact
from scheduler_daemon.domain.status import OutcomeStatus
from scheduler_daemon.executors.base import FinishedJob, Job, JobContext, Outcome, decode_tail
from scheduler_daemon.executors.timer import DEADLINE_ERROR, JobTimers, next_wake, timeout_error
from scheduler_daemon.executors.wire import NOT_STARTED_ERROR, OUTPUT_TAIL_BYTES, error_line

DEFAULT_TIMEOUT_SECONDS = 30.0


class NoRedirect(urllib.request.HTTPRedirectHandler):
    """A webhook that answers 3xx has not done the job; report it instead of following it."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class HttpJob:
    """One request; its outcome is decided by whichever comes first: answer, timer or stop()."""

    def __init__(self, executor: "HttpExecutor", ctx: JobContext, timeout: float) -> None:
        self.run_id = ctx.run_id
        self.executor = executor
        self.timeout = timeout
        # Under the executor's timer lock. stop() ends the run at once: a thread has no grace.
        self.timers = JobTimers(time.monotonic(), deadline=ctx.deadline, timeout=timeout)
        self._outcome: Outcome | None = None
        self.sent = False  # under the timer lock: the request thread is past its last look

    def poll(self) -> Outcome | None:
        return self._outcome

    def stop(self, reason: str) -> None:
        self.finish(Outcome(OutcomeStatus.STOPPED, error=reason))

    def extend(self, deadline: float) -> None:
        with self.executor.timer:
            self.timers.extend(deadline)
            self.executor.timer.notify()

    def live_output(self) -> str | None:
        """An HTTP job's output is its response body, known once it ends."""
        outcome = self._outcome
        return None if outcome is None else outcome.output_tail

    def finish(self, outcome: Outcome) -> None:
        """Record `outcome` unless another one came first."""
        with self.executor.timer:
            if self._outcome is not None:
                return
            self._outcome = outcome
            self.executor.running.discard(self)
            self.executor.timer.notify()
        self.executor.wake.set()


class HttpExecutor:
    """Starts HTTP jobs; owns the opener and the timekeeper thread."""

    kind = "http"

    def __init__(self, wake: threading.Event) -> None:
        self.wake = wake
        self.opener = urllib.request.build_opener(NoRedirect())
        self.timer = threading.Condition(threading.RLock())
        self.running: set[HttpJob] = set()
        self._closed = False
        self._keeper: threading.Thread | None = None

    def start(self, ctx: JobContext, payload: Mapping[str, Any]) -> Job:
        url = payload.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            return FinishedJob.failed(ctx.run_id, "payload has no http(s) 'url'")
        try:  # a row written by SQL, not `tasks add`: its run fails, the pass goes on
            limit.http_url("the payload's url", url)
        except limit.OutOfBounds as exc:
            return FinishedJob.failed(ctx.run_id, str(exc))
        timeout = DEFAULT_TIMEOUT_SECONDS if ctx.timeout is None else ctx.timeout
        job = HttpJob(self, ctx, timeout)
        url, headers = request_headers(url, payload.get("headers") or {})
        headers.update({"Content-Type": "application/json", "Idempotency-Key": ctx.idempotency_key})
        if ctx.traceparent and not any(name.lower() == "traceparent" for name in headers):
            headers["traceparent"] = ctx.traceparent  # a task's own traceparent header is kept
        request = urllib.request.Request(  # noqa: S310 -- the scheme is checked above: http(s)
            url, data=json.dumps(ctx.identifiers()).encode(), headers=headers, method="POST"
        )
        with self.timer:
            if self._closed:
                return FinishedJob.failed(ctx.run_id, "executor closed")
            self.running.add(job)
            if self._keeper is None:
                self._keeper = threading.Thread(
                    target=self._keep_time, name="http-executor-timekeeper", daemon=True
                )
                self._keeper.start()
            self.timer.notify()
        thread = threading.Thread(
            target=self._request, args=(job, request), name=f"http-run-{ctx.run_id}", daemon=True
        )
        thread.start()
        return job

    def close(self) -> None:
        with self.timer:
            self._closed = True
            jobs = list(self.running)
        for job in jobs:
            job.stop("executor closed")
        with self.timer:
            self.timer.notify()
        if self._keeper is not None:
            self._keeper.join()

    def _request(self, job: HttpJob, request: urllib.request.Request) -> None:
        with self.timer:  # the last look before the request leaves
            if job.poll() is not None:  # stopped, or its deadline passed, before it began
                return
            if time.monotonic() >= job.timers.deadline:
                job.finish(Outcome(OutcomeStatus.STOPPED, error=NOT_STARTED_ERROR))
                return
            job.sent = True
        try:
            with self.opener.open(request, timeout=job.timeout) as response:
                status = response.status
                tail = _read_tail(response)
        except urllib.error.HTTPError as exc:
            status = exc.code
            tail = _read_tail(exc)
        except TimeoutError:
            job.finish(Outcome(OutcomeStatus.TIMEOUT, error=timeout_error(job.timeout)))
            return
        except Exception as exc:  # every failure of the request is the run's, never the daemon's
            reason = getattr(exc, "reason", None)  # URLError wraps the socket's error
            if isinstance(reason, TimeoutError):
                job.finish(Outcome(OutcomeStatus.TIMEOUT, error=timeout_error(job.timeout)))
            elif isinstance(reason, BaseException):
                job.finish(Outcome(OutcomeStatus.FAILED, error=redact(error_line(reason))))
            else:
                job.finish(Outcome(OutcomeStatus.FAILED, error=redact(error_line(exc))))
            return
        if 200 <= status < 300:
            job.finish(Outcome(OutcomeStatus.SUCCESS, http_status=status, output_tail=tail))
        else:
            job.finish(
                Outcome(
                    OutcomeStatus.FAILED,
                    http_status=status,
                    output_tail=tail,
                    error=f"HTTP {status}",
                )
            )

    def _keep_time(self) -> None:
        """Apply timeouts and deadlines; sleep until the next one or until something changes."""
        with self.timer:
            while not (self._closed and not self.running):
                now = time.monotonic()
                due: list[tuple[HttpJob, Outcome]] = []
                for job in self.running:
                    stop = job.timers.fire(now)
                    if stop is not None:
                        error = stop.error
                        if error == DEADLINE_ERROR and not job.sent:  # the request never left
                            error = NOT_STARTED_ERROR
                        due.append((job, Outcome(stop.status, error=error)))
                for job, outcome in due:
                    job.finish(outcome)  # the condition's lock is re-entrant
                if due:
                    continue
                wake = next_wake(job.timers for job in self.running)
                self.timer.wait(None if wake is None else max(0.0, wake - now))


def request_headers(url: str, given: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The URL without user info, and the headers to send: the task's, plus Basic credentials
    from the user info unless the task sets Authorization itself."""
    headers = dict(given)
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, headers
    host = parts.netloc.rpartition("@")[2]
    if not any(name.lower() == "authorization" for name in headers):
        user = urllib.parse.unquote(parts.username or "")
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), headers


def _read_tail(response: HTTPResponse | urllib.error.HTTPError) -> str:
    """The last OUTPUT_TAIL_BYTES of the body, read in chunks so a big body costs no memory."""
    kept = b""
    while chunk := response.read(OUTPUT_TAIL_BYTES):
        kept = (kept + chunk)[-OUTPUT_TAIL_BYTES:]
    return decode_tail(kept)
