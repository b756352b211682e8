"""The deliverer's POST against raw receivers on 127.0.0.1 (issue 44, item 3): one deadline for
the whole request whatever the receiver does, at most RESPONSE_LIMIT bytes of its answer read,
and what it said kept in the error."""

import time
from collections.abc import Callable, Iterator

import pytest

from scheduler_daemon.executors.webhook import Watchdog, post_json
from tests.support import RawReceiver

Send = Callable[[bytes], bool]


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)  # loopback only, never through a proxy


@pytest.fixture
def receiver() -> Iterator[RawReceiver]:
    made = RawReceiver(lambda send: None)
    yield made
    made.close()


def _timed(url: str, timeout: float) -> tuple[str | None, float]:
    started = time.monotonic()
    error = post_json(url, {"delivery_id": "d"}, {}, timeout=timeout)
    return error, time.monotonic() - started


@pytest.mark.parametrize(
    "status",
    [b"", b"HTTP/1.1 200 OK\r\n"],
    ids=["the status line itself", "the headers after it"],
)
def test_a_receiver_dripping_its_answer_is_cut_at_the_deadline(
    receiver: RawReceiver, status: bytes
) -> None:
    """A byte every 0.3 s never lets a per-read timeout of 1 s fire: the old POST waited for
    as long as the receiver dripped. One deadline for the whole POST: 1 s, then `timed out`,
    even when the status line said 200 before the drip (the answer never ended)."""
    receiver.drip(status=status, every=0.3)
    error, elapsed = _timed(receiver.url, timeout=1.0)
    assert error == "timed out after 1 s"
    assert 1.0 <= elapsed < 1.8


def test_a_receiver_that_never_answers_is_cut_at_the_deadline(receiver: RawReceiver) -> None:
    receiver.answer = lambda send: receiver.closing.wait(30) and None
    error, elapsed = _timed(receiver.url, timeout=0.5)
    assert error == "timed out after 0.5 s"
    assert elapsed < 1.3


def test_at_most_the_response_limit_is_read_of_an_endless_answer(receiver: RawReceiver) -> None:
    """A refusal whose headers and body never end, sent as fast as the socket takes them: the
    POST stops reading at RESPONSE_LIMIT bytes and reports the status at once, long before its
    deadline. The old POST read the body to its end."""

    def endless(send: Send) -> None:
        send(b"HTTP/1.1 503 Busy\r\nX-Pad: ")
        for _ in range(800):  # 50 MiB at most, if nothing stops reading
            if not send(b"p" * 65536):
                return

    receiver.answer = endless
    error, elapsed = _timed(receiver.url, timeout=10.0)
    assert error is not None
    assert error.startswith("HTTP 503 Busy")
    assert elapsed < 5


def test_a_refusal_keeps_its_reason_and_the_start_of_its_body_mended_later(
    receiver: RawReceiver,
) -> None:
    body = b'{"error": "bad\x00payload"}'
    receiver.answer = lambda send: bool(
        send(b"HTTP/1.1 422 Unprocessable\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    )
    error, _ = _timed(receiver.url, timeout=5.0)
    assert error == 'HTTP 422 Unprocessable: {"error": "bad\x00payload"}'  # storable_error mends


def test_a_2xx_answer_is_delivered_without_reading_its_body(receiver: RawReceiver) -> None:
    receiver.answer = lambda send: bool(
        send(b"HTTP/1.1 204 No Content\r\n\r\n") and receiver.closing.wait(30)
    )
    error, elapsed = _timed(receiver.url, timeout=5.0)
    assert error is None
    assert elapsed < 1


def test_a_watchdog_closed_before_its_deadline_never_shuts_the_connection_after(
    receiver: RawReceiver,
) -> None:
    """Ended before its deadline, the watchdog must not shut anything down later: the
    descriptor it watched may belong to another connection by then. The connection still
    carries a request and its answer after the deadline passed."""
    receiver.answer = lambda send: bool(send(b"HTTP/1.1 204 No Content\r\n\r\n"))
    watchdog = Watchdog(time.monotonic() + 0.2)
    host, port = receiver.url.split("//")[1].split("/")[0].split(":")
    sock = watchdog.connect((host, int(port)))
    assert watchdog.close() is False
    time.sleep(0.4)  # past the deadline: its timer was cancelled
    with sock:
        sock.sendall(b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 204")


def test_a_watchdog_past_its_deadline_shuts_the_connection_down(receiver: RawReceiver) -> None:
    receiver.answer = lambda send: receiver.closing.wait(30) and None
    watchdog = Watchdog(time.monotonic() + 0.2)
    host, port = receiver.url.split("//")[1].split("/")[0].split(":")
    sock = watchdog.connect((host, int(port)))
    with sock:
        sock.sendall(b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        sock.settimeout(5)
        started = time.monotonic()
        assert sock.recv(100) == b""  # woken by the shutdown, not by the 5 s timeout
        assert time.monotonic() - started < 1
    assert watchdog.close() is True
