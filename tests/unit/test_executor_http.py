"""The http executor against a local HTTP server on loopback: status, body, timers and stop()."""

import base64
import dataclasses
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from scheduler_daemon.domain.status import OutcomeStatus
from scheduler_daemon.executors.base import Outcome
from scheduler_daemon.executors.http import HttpExecutor
from scheduler_daemon.executors.webhook import post_json
from scheduler_daemon.executors.wire import NOT_STARTED_ERROR, OUTPUT_TAIL_BYTES
from tests.unit.executor_support import IDENTIFIERS_42, context, wait_outcome

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()  # ends every slow answer at teardown

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.requests.append({"headers": dict(self.headers), "body": json.loads(body)})
        query = parse_qs(urlsplit(self.path).query)
        status = int(query.get("status", ["200"])[0])
        self.server.release.wait(float(query.get("delay", ["0"])[0]))
        payload = b"x" * int(query.get("size", ["0"])[0]) + b"answered"
        self.send_response(status)
        if status in (301, 302):
            self.send_header("Location", "/elsewhere")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def server() -> Iterator[Server]:
    server = Server()
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def http(wake: threading.Event, monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpExecutor]:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)  # loopback only, never through a proxy
    executor = HttpExecutor(wake)
    yield executor
    executor.close()


def test_a_2xx_answer_succeeds_with_the_status_and_the_body(
    http: HttpExecutor, server: Server, wake: threading.Event
) -> None:
    outcome = wait_outcome(http.start(context(), {"url": server.url + "/?status=201"}), wake)

    assert outcome == Outcome("success", http_status=201, output_tail="answered")
    assert type(outcome.status) is OutcomeStatus


def test_the_body_and_headers_carry_the_run_identifiers(
    http: HttpExecutor, server: Server, wake: threading.Event
) -> None:
    wait_outcome(http.start(context(run_id=42), {"url": server.url}), wake)

    [request] = server.requests
    assert request["headers"]["Content-Type"] == "application/json"
    assert request["headers"]["Idempotency-Key"] == "occ-7-key"
    assert request["body"] == {
        **IDENTIFIERS_42,
        "args": None,  # a trigger without arguments (tests/chaos/test_trigger_args.py: with)
    }


def test_the_tasks_headers_are_sent_and_a_url_password_becomes_basic_auth(
    http: HttpExecutor, server: Server, wake: threading.Event
) -> None:
    headers = {"X-Api-Key": "k1", "Accept": "text/plain"}
    wait_outcome(http.start(context(), {"url": server.url, "headers": headers}), wake)
    with_password = server.url.replace("//", "//hook%40user:p%3Ass@")
    wait_outcome(http.start(context(), {"url": with_password}), wake)

    first, second = (r["headers"] for r in server.requests)
    assert (first["X-Api-Key"], first["Accept"]) == ("k1", "text/plain")
    assert first["Content-Type"] == "application/json"
    assert second["Authorization"] == "Basic " + base64.b64encode(b"hook@user:p:ss").decode()


def test_a_connection_error_never_carries_the_url_password(
    http: HttpExecutor, wake: threading.Event
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://user:hunter2@127.0.0.1:{port}/"
    outcome = wait_outcome(http.start(context(), {"url": url}), wake)

    assert outcome.status == "failed"
    assert "hunter2" not in (outcome.error or "")


def test_a_server_error_fails_with_the_status(
    http: HttpExecutor, server: Server, wake: threading.Event
) -> None:
    outcome = wait_outcome(http.start(context(), {"url": server.url + "/?status=500"}), wake)

    assert outcome == Outcome("failed", http_status=500, output_tail="answered", error="HTTP 500")


def test_a_redirect_is_reported_not_followed(
    http: HttpExecutor, server: Server, wake: threading.Event
) -> None:
    outcome = wait_outcome(http.start(context(), {"url": server.url + "/?status=302"}), wake)

    assert outcome.status == "failed"
    assert outcome.error == "HTTP 302"
    assert len(server.requests) == 1


def test_a_refused_connection_fails_with_the_error_line(
    http: HttpExecutor, wake: threading.Event
) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # bound, not listening: connections are refused
        outcome = wait_outcome(http.start(context(), {"url": f"http://127.0.0.1:{port}/"}), wake)

    assert outcome.status == "failed"
    assert outcome.error == "ConnectionRefusedError: [Errno 111] Connection refused"


def test_the_timeout_ends_the_run_as_timeout(
    http: HttpExecutor, server: Server, wake: threading.Event
) -> None:
    started = time.monotonic()
    job = http.start(context(timeout=0.3), {"url": server.url + "/?delay=10"})

    outcome = wait_outcome(job, wake)

    assert outcome == Outcome("timeout", error="timed out after 0.3 s")
    assert time.monotonic() - started < 0.3 + 0.3


def test_stop_ends_the_run_at_once(
    http: HttpExecutor, server: Server, wake: threading.Event
) -> None:
    job = http.start(context(), {"url": server.url + "/?delay=10"})

    job.stop("lease lost")

    assert job.poll() == Outcome("stopped", error="lease lost")
    assert wake.is_set()


def test_the_trust_deadline_stops_the_run(
    http: HttpExecutor, server: Server, wake: threading.Event
) -> None:
    ctx = context(deadline_in=0.3)
    job = http.start(ctx, {"url": server.url + "/?delay=10"})

    outcome = wait_outcome(job, wake)

    assert outcome == Outcome("stopped", error="killed: trust deadline passed")
    assert time.monotonic() - ctx.deadline < 0.3


def test_no_request_leaves_once_the_trust_deadline_passed(
    http: HttpExecutor, server: Server, wake: threading.Event
) -> None:
    # The window is forced: the executor's lock is held (re-entrant: start() still runs) past
    # the deadline, so the request thread reaches its last look late, as a thread of a daemon
    # stalled between its claim and the request would. On 518d2f3 the request went out anyway.
    with http.timer:
        job = http.start(context(run_id=21, deadline_in=0.2), {"url": server.url})
        time.sleep(0.4)

    outcome = wait_outcome(job, wake)
    for thread in threading.enumerate():
        if thread.name == "http-run-21":
            thread.join(5)
    assert server.requests == []
    assert outcome == Outcome("stopped", error=NOT_STARTED_ERROR)
    # Within its deadline the same request is sent.
    assert wait_outcome(http.start(context(run_id=22), {"url": server.url}), wake).status == (
        "success"
    )
    assert len(server.requests) == 1


def test_extend_keeps_a_run_alive_past_its_original_deadline(
    http: HttpExecutor, server: Server, wake: threading.Event
) -> None:
    job = http.start(context(deadline_in=0.3), {"url": server.url + "/?delay=0.8"})
    job.extend(time.monotonic() + 5.0)

    assert wait_outcome(job, wake).status == "success"


def test_the_output_tail_is_bounded_for_a_body_of_megabytes(
    http: HttpExecutor, server: Server, wake: threading.Event
) -> None:
    outcome = wait_outcome(http.start(context(), {"url": server.url + "/?size=5000000"}), wake)

    assert outcome.status == "success"
    assert len(outcome.output_tail) == OUTPUT_TAIL_BYTES
    assert outcome.output_tail.endswith("xanswered")


@pytest.mark.parametrize("payload", [{}, {"url": "file:///etc/passwd"}, {"url": 3}])
def test_a_payload_without_an_http_url_fails_without_raising(
    http: HttpExecutor, wake: threading.Event, payload: dict[str, Any]
) -> None:
    outcome = wait_outcome(http.start(context(), payload), wake)

    assert outcome == Outcome("failed", error="payload has no http(s) 'url'")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://[::1/hook", "Invalid IPv6 URL"),
        ("http://a b/h", "whitespace"),
        ("http://hooks.example:99999/h", "Port out of range"),
    ],
)
def test_a_url_that_does_not_parse_fails_its_run_with_one_line_instead_of_raising(
    http: HttpExecutor, wake: threading.Event, url: str, reason: str
) -> None:
    """A row written by SQL, past `tasks add`'s check: `start` raised ValueError from urlsplit
    before (issue 44, KNOWN-FAILURES 39), and the launch pass crashed with the claim committed."""
    outcome = wait_outcome(http.start(context(), {"url": url}), wake)

    assert outcome.status == "failed"
    assert outcome.error is not None
    assert reason in outcome.error
    assert "\n" not in outcome.error


def test_close_stops_running_requests(
    http: HttpExecutor, server: Server, wake: threading.Event
) -> None:
    job = http.start(context(), {"url": server.url + "/?delay=10"})

    http.close()

    assert job.poll() == Outcome("stopped", error="executor closed")


def test_a_runs_traceparent_is_sent_as_a_header_unless_the_task_sets_its_own(
    http: HttpExecutor, server: Server, wake: threading.Event
) -> None:
    traced = dataclasses.replace(context(), traceparent=TRACEPARENT)
    own = "00-11111111111111111111111111111111-2222222222222222-01"
    wait_outcome(http.start(traced, {"url": server.url}), wake)
    wait_outcome(http.start(traced, {"url": server.url, "headers": {"TraceParent": own}}), wake)
    wait_outcome(http.start(context(), {"url": server.url}), wake)

    traced_run, own_header, untraced = (
        {k.lower(): v for k, v in r["headers"].items()} for r in server.requests
    )
    assert traced_run["traceparent"] == TRACEPARENT
    assert own_header["traceparent"] == own  # kept, and sent once
    assert "traceparent" not in untraced


def test_post_json_sends_the_body_and_headers_and_says_why_an_answer_is_not_2xx(
    http: HttpExecutor, server: Server
) -> None:
    """The deliverer's POST (ADR 0016): None on 2xx, the status otherwise, no redirect."""
    headers = {"Idempotency-Key": "d-1", "X-Api-Key": "k1"}
    assert (
        post_json(server.url + "/?status=204", {"delivery_id": "d-1"}, headers, timeout=5) is None
    )
    assert post_json(server.url + "/?status=500", {}, headers, timeout=5) == (
        "HTTP 500 Internal Server Error: answered"
    )
    assert post_json(server.url + "/?status=302", {}, headers, timeout=5).startswith("HTTP 302 ")
    assert post_json(server.url + "/?delay=2", {}, headers, timeout=0.2) == "timed out after 0.2 s"
    assert post_json("ftp://example.invalid/", {}, headers, timeout=1) == "not an http(s) URL"
    first = server.requests[0]
    assert first["body"] == {"delivery_id": "d-1"}
    assert first["headers"]["Idempotency-Key"] == "d-1"
    assert first["headers"]["X-Api-Key"] == "k1"
    assert first["headers"]["Content-Type"] == "application/json"
