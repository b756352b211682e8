"""Notifications (pure): the body every POST of a row carries, and the backoff after a failure."""

from datetime import timedelta

from scheduler_daemon.domain.notification import BACKOFF_CAP, Notification, backoff


def _row(**kw: object) -> dict[str, object]:
    return {
        "id": 1,
        "delivery_id": "0b6f1c3e-0000-4000-8000-000000000001",
        "occurrence_id": 7,
        "task_id": 3,
        "event": "failure",
        "payload": {"event": "failure", "task": "job", "attempt": 2},
        "attempts": 1,
        "url": "http://127.0.0.1:9/hook",
        "headers": None,
        **kw,
    }


def test_the_body_is_the_payload_with_the_rows_delivery_id_whatever_the_attempt() -> None:
    first = Notification.from_row(_row())
    again = Notification.from_row(_row(attempts=4))
    assert first.body() == again.body()
    assert first.body() == {
        "event": "failure",
        "task": "job",
        "attempt": 2,
        "delivery_id": "0b6f1c3e-0000-4000-8000-000000000001",
    }
    assert first.headers == {}


def test_the_backoff_doubles_from_a_second_to_its_cap() -> None:
    waits = [backoff(n) for n in range(1, 6)]
    assert waits == [timedelta(seconds=s) for s in (1, 2, 4, 8, 16)]
    assert backoff(40) == BACKOFF_CAP
    assert backoff(10_000) == BACKOFF_CAP  # no overflow however many attempts


def test_a_payload_or_headers_too_deep_to_decode_is_the_rows_problem_not_an_exception() -> None:
    """The claim has committed when the row is read: a value nested 1,000 deep (written by SQL
    behind the CLI's back) must become the row's error, never a RecursionError out of the
    pass (issue 44). The old row kept the driver's decoded jsonb, which raised in the claim."""
    deep = "[" * 1000 + "]" * 1000
    for field in ("payload", "headers"):
        notification = Notification.from_row(_row(**{field: deep}))
        assert notification.problem is not None
        assert "1000 levels deep" in notification.problem
    assert Notification.from_row(_row(payload='{"event": "failure"}')).problem is None
    assert Notification.from_row(_row(payload="[1]")).problem is not None  # not an object
