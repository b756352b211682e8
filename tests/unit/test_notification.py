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
