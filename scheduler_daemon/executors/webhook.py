"""One webhook POST bounded in time and in what it reads: the deliverer's (ADR 0016).

A socket timeout bounds each read, not the request: a receiver that sends a byte every few
seconds held the old POST for ever (issue 44, KNOWN-FAILURES 41). Here a watchdog shuts the
connection down at one deadline for the whole request (connect, TLS handshake, send, the
answer): any call blocked on the socket returns at once, and the POST ends as timed out. It
holds a duplicate of the socket's descriptor, closed under its lock when the POST ends, so it
never shuts a descriptor the process reused for something else. At most RESPONSE_LIMIT bytes of
the answer are read (the status line, headers, and for a refusal the start of its body); past
that the answer reads as ended. Name resolution is the one step the deadline cannot cut: it is
bounded by the resolver's own timeouts.
"""

import contextlib
import functools
import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from scheduler_daemon.domain.secret import redact
from scheduler_daemon.executors.http import NoRedirect, request_headers
from scheduler_daemon.executors.timer import timeout_error
from scheduler_daemon.executors.wire import error_line, one_line

RESPONSE_LIMIT = 8192
"""Bytes of an answer read at most: enough for its status line, headers and an error's start."""
SHOWN_CHARS = 200
"""Characters of a refusal's reason phrase and of its body's start kept in the error."""


class Watchdog:
    """Shuts one request's connection down at `deadline` (time.monotonic()); `fired` says it
    did. `close()` when the request ended, whatever happened: the timer stops and the duplicate
    descriptor is closed."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fired = False
        self._lock = threading.Lock()
        self._watched: socket.socket | None = None
        self._closed = False
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self) -> float:
        return max(0.001, self.deadline - time.monotonic())

    def connect(
        self,
        address: tuple[str, int],
        timeout: object = None,
        source_address: tuple[str, int] | None = None,
    ) -> socket.socket:
        """socket.create_connection within what is left of the deadline, then watched (the
        connection's `_create_connection`: http.client passes its own timeout, unused)."""
        sock = socket.create_connection(address, self.remaining(), source_address)
        with self._lock:
            if self._closed:
                sock.close()
                raise TimeoutError("the request ended")
            self._watched = sock.dup()  # shut down with the socket, even once TLS wraps it
            if self.fired:
                _shut(self._watched)
        return sock

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            if self._watched is not None and not self._closed:
                _shut(self._watched)

    def close(self) -> bool:
        """Ends the watch; returns whether the deadline cut the request."""
        with self._lock:
            self._closed = True
            self._timer.cancel()
            if self._watched is not None:
                self._watched.close()
            return self.fired


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by the peer: nothing waits on it
        sock.shutdown(socket.SHUT_RDWR)


class _Capped:
    """A response's reader that ends after `limit` bytes, whatever the peer sends."""

    def __init__(self, raw: Any, limit: int) -> None:
        self._raw = raw
        self._left = limit

    def _take(self, read: Callable[[int], bytes], size: int | None) -> bytes:
        want = self._left if size is None or size < 0 else min(size, self._left)
        data = read(want) if want > 0 else b""
        self._left -= len(data)
        return data

    def readline(self, size: int | None = -1) -> bytes:
        return self._take(self._raw.readline, size)

    def read(self, size: int | None = -1) -> bytes:
        return self._take(self._raw.read, size)

    def read1(self, size: int = -1) -> bytes:
        return self._take(self._raw.read1, size)

    def peek(self, size: int = 0) -> bytes:
        return bytes(self._raw.peek(size)[: self._left])

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def flush(self) -> None:
        self._raw.flush()

    def fileno(self) -> int:
        return int(self._raw.fileno())

    def close(self) -> None:
        self._raw.close()


class _CappedResponse(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, *args: Any, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp = _Capped(self.fp, RESPONSE_LIMIT)  # type: ignore[assignment]


def _bounded(
    http_class: Callable[..., http.client.HTTPConnection],
    watchdog: Watchdog,
    host: str,
    **kwargs: Any,
) -> http.client.HTTPConnection:
    """urllib's connection, connecting under `watchdog` and reading a capped answer."""
    connection = http_class(host, **kwargs)
    connection._create_connection = watchdog.connect  # type: ignore[attr-defined]
    connection.response_class = _CappedResponse
    return connection


class _Bounded(urllib.request.AbstractHTTPHandler):
    """A handler whose connections connect under `watchdog` and read a capped answer."""

    def __init__(self, watchdog: Watchdog) -> None:
        super().__init__()
        self.watchdog = watchdog

    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
        made = functools.partial(_bounded, http_class, self.watchdog)
        return super().do_open(made, req, **kwargs)


class _BoundedHTTP(_Bounded, urllib.request.HTTPHandler):
    pass


class _BoundedHTTPS(_Bounded, urllib.request.HTTPSHandler):
    pass


def refusal(status: int, reason: str | None, start: bytes) -> str:
    """The error of a non-2xx answer: its status, reason phrase and the start of its body, on
    one line (not yet storable: the caller mends it)."""
    parts = [f"HTTP {status}"]
    shown = one_line(reason or "")[:SHOWN_CHARS]
    if shown:
        parts.append(shown)
    body = one_line(start.decode("utf-8", "replace"))[:SHOWN_CHARS]
    return " ".join(parts) + (f": {body}" if body else "")


def post_json(
    url: str, body: Mapping[str, Any], headers: Mapping[str, str], *, timeout: float
) -> str | None:
    """One POST of `body` as JSON within `timeout` seconds in all, as a run's request is sent
    (the headers as given, a password in the URL as Basic credentials, no redirect followed),
    on the caller's thread. None: a 2xx answer; else why not (`HTTP 500 Internal Server
    Error: ...`, a connection error with secrets redacted, `timed out after N s`)."""
    if not url.startswith(("http://", "https://")):
        return "not an http(s) URL"
    url, sent = request_headers(url, headers)
    sent["Content-Type"] = "application/json"
    request = urllib.request.Request(  # noqa: S310 -- the scheme is checked above: http(s)
        url, data=json.dumps(body, default=str).encode(), headers=sent, method="POST"
    )
    watchdog = Watchdog(time.monotonic() + timeout)
    try:
        error = _send(request, watchdog, timeout)
    finally:
        cut = watchdog.close()
    return timeout_error(timeout) if cut else error


def _send(request: urllib.request.Request, watchdog: Watchdog, timeout: float) -> str | None:
    # The proxy settings of now, as the http executor's opener reads them.
    opener = urllib.request.build_opener(
        NoRedirect(), _BoundedHTTP(watchdog), _BoundedHTTPS(watchdog)
    )
    try:
        with opener.open(request, timeout=timeout) as response:
            return None if 200 <= response.status < 300 else f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        with exc:
            start = exc.read(RESPONSE_LIMIT) if exc.fp is not None else b""
            return refusal(exc.code, exc.reason, start)
    except TimeoutError:
        return timeout_error(timeout)
    except Exception as exc:  # every failure of the request is the notification's
        reason = getattr(exc, "reason", None)  # URLError wraps the socket's error
        if isinstance(reason, TimeoutError):
            return timeout_error(timeout)
        return redact(error_line(reason if isinstance(reason, BaseException) else exc))
