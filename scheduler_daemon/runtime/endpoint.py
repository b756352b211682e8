"""The daemon's HTTP endpoint (--http-port): /healthz, /readyz and /metrics, served by one asyncio
event loop on a thread of its own, so that an open connection costs a socket, never a thread.

- `/healthz` (liveness): 200 `ok` while the loop makes progress, 503 with one line when it is
  stuck (`health.LoopProgress`). Never touches the database; answered on the event loop itself.
- `/readyz` (readiness): 200 `ready` when registered, not draining, and the database answers with
  this build's schema; 503 with one line naming the reason otherwise (`health.Readiness`). A
  degraded side part (a dead waker thread) is named after `ready`, still with 200 (ADR 0005).
- `/metrics`: the Prometheus text exposition of the daemon's registry (`metrics.Metrics`).

`/readyz` (it may wait for the database) and `/metrics` run on HANDLER_THREADS threads. A client
has READ_TIMEOUT_SECONDS for its whole request head (trickling bytes buys no more) and as long to
take the answer; one request per connection. At most MAX_CONNECTIONS wait for their request: one
more closes the oldest of them, so idle clients never lock a probe out. A client's failure (a
reset, a bad request, a timeout) is one `endpoint_client_error` event, never a traceback.
"""

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from typing import Any

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from scheduler_daemon.settings import InvalidSettings

log = structlog.get_logger()
READ_TIMEOUT_SECONDS = 5.0  # for the request head; as long again for the answer
MAX_CONNECTIONS = 32  # waiting for their request; probes and scrapes need a few
HANDLER_THREADS = 2  # /readyz and /metrics
MAX_HEAD_BYTES = 8192
STOP_TIMEOUT_SECONDS = 5.0
TEXT = "text/plain; charset=utf-8"

Answer = tuple[int, str, bytes]
NOT_FOUND = (False, lambda: (404, TEXT, b"not found: try /healthz\n"))


class ClientError(Exception):
    """A client's failure: `reason` is the event's stable field, the message says more."""

    def __init__(self, reason: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status  # answered with this status first, when set


class Endpoint:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        liveness: Callable[[], str | None],
        readiness: Callable[[], str | None],
        registry: CollectorRegistry,
        degraded: Callable[[], str | None] = lambda: None,
    ) -> None:
        def ready() -> Answer:
            problem = readiness()
            note = degraded() if problem is None else None
            return _probe(problem, "ready" if note is None else f"ready (degraded: {note})")

        self._routes: dict[str, tuple[bool, Callable[[], Answer]]] = {  # path: (pooled, answer)
            "/healthz": (False, lambda: _probe(liveness(), "ok")),
            "/readyz": (True, ready),
            "/metrics": (True, lambda: (200, CONTENT_TYPE_LATEST, generate_latest(registry))),
        }
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.bind((host, port))
            self._socket.listen(128)
        except OSError as exc:
            self._socket.close()
            raise InvalidSettings(
                f"--http-host {host} --http-port {port}: cannot listen: {exc.strerror or exc}"
            ) from exc
        self._socket.setblocking(False)
        self.address: tuple[str, int] = self._socket.getsockname()[:2]
        self._pool = ThreadPoolExecutor(HANDLER_THREADS, thread_name_prefix="http-handler")
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(_loop_error)
        self._stopping = asyncio.Event()
        self._waiting: dict[asyncio.Task[None], None] = {}  # reading their head, oldest first
        self._evicted: set[asyncio.Task[None]] = set()
        self._open: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._serve, name="http-endpoint", daemon=True)

    def start(self) -> None:
        host, port = self.address
        self._thread.start()
        log.info("http_listening", host=host, port=port)

    @property
    def alive(self) -> bool:
        """False once a started endpoint's thread died."""
        return self._thread.ident is None or self._thread.is_alive()

    def stop(self) -> None:
        """Closes the listener and every connection, waiting or answered, then lets the handler
        threads go; returns within STOP_TIMEOUT_SECONDS."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(STOP_TIMEOUT_SECONDS)
        if not self._thread.is_alive():
            self._socket.close()
            if not self._loop.is_closed():  # never started
                self._loop.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _serve(self) -> None:
        with contextlib.closing(self._loop):
            self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        server = await asyncio.start_server(
            self._connection, sock=self._socket, limit=MAX_HEAD_BYTES
        )
        await self._stopping.wait()
        # Accept no more, but let those accepted get their handler (a transport made after
        # server.close() fails, its socket left open), then cancel every handler.
        self._loop.remove_reader(self._socket.fileno())
        while tasks := asyncio.all_tasks() - {asyncio.current_task()}:
            for task in self._open:
                task.cancel()
            await asyncio.wait(tasks, timeout=0.05)
        server.close()  # the connections the kernel queued meanwhile are reset
        await server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        address = writer.get_extra_info("peername") or ("?", 0)
        peer = f"{address[0]}:{address[1]}"
        self._open.add(task)
        self._waiting[task] = None
        if len(self._waiting) > MAX_CONNECTIONS:
            oldest = next(iter(self._waiting))
            del self._waiting[oldest]
            self._evicted.add(oldest)
            oldest.cancel()
        try:
            async with asyncio.timeout(READ_TIMEOUT_SECONDS):
                head = await _read_head(reader)
            self._waiting.pop(task, None)
            status, kind, body = await self._answer(head)
            async with asyncio.timeout(READ_TIMEOUT_SECONDS):
                writer.write(_response(status, kind, body))
                await writer.drain()
        except asyncio.CancelledError:  # ours: ending normally, the task leaves no error behind
            if task in self._evicted:  # else the endpoint stops
                _client_error(peer, "over_cap", f"over {MAX_CONNECTIONS} connections: the oldest")
        except TimeoutError:
            stage = "request head" if task in self._waiting else "answer"
            _client_error(peer, "timeout", f"no complete {stage} within {READ_TIMEOUT_SECONDS:g}s")
        except ClientError as exc:
            _client_error(peer, exc.reason, str(exc))
            if exc.status is not None:
                with contextlib.suppress(OSError):
                    writer.write(_response(exc.status, TEXT, f"{exc}\n".encode()))
        except OSError as exc:  # ECONNRESET, EPIPE
            _client_error(peer, "reset", type(exc).__name__)
        finally:
            self._waiting.pop(task, None)
            self._evicted.discard(task)
            self._open.discard(task)
            writer.close()

    async def _answer(self, head: bytes) -> Answer:
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise ClientError("bad_request", f"not an HTTP/1 request line: {parts[0][:40]!r}", 400)
        method, target, _ = parts
        if method != "GET":
            raise ClientError("bad_request", f"method {method[:16]!r} not allowed: GET only", 405)
        pooled, answer = self._routes.get(target.split("?", 1)[0], NOT_FOUND)
        try:
            if not pooled:
                return answer()
            return await asyncio.get_running_loop().run_in_executor(self._pool, answer)
        except Exception as exc:  # the probe must answer, whatever the handler met
            log.exception("endpoint_handler_failed", path=target[:64], error=repr(exc))
            return 500, TEXT, f"internal error: {type(exc).__name__}\n".encode()


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:  # a TCP probe, or a client that changed its mind
            raise ClientError("closed", "closed without a request") from exc
        raise ClientError("incomplete", f"closed after {len(exc.partial)} bytes") from exc
    except asyncio.LimitOverrunError as exc:
        raise ClientError("bad_request", f"request head over {MAX_HEAD_BYTES} bytes", 431) from exc


def _response(status: int, kind: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: {kind}\r\n"
        f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def _client_error(peer: str, reason: str, error: str) -> None:
    emit = log.debug if reason == "closed" else log.info
    emit("endpoint_client_error", peer=peer, reason=reason, error=error)


def _loop_error(_: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The event loop's own failures (accept out of file descriptors): one event."""
    error = context.get("exception")
    log.error("endpoint_error", message=context.get("message"), error=repr(error))


def _probe(problem: str | None, fine: str) -> Answer:
    if problem is None:
        return 200, TEXT, f"{fine}\n".encode()
    return 503, TEXT, f"{problem}\n".encode()
