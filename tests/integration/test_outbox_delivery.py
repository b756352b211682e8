"""The deliverer against real receivers on 127.0.0.1 and a real database (issue 44, item 3): a
POST ends at one deadline whatever the receiver does, several go out at once so one slow
receiver holds neither the others nor every worker, and a result the database refuses to
record becomes the row's error and back-off instead of failing the pass."""

import threading
import time
from typing import Any

import pytest

from scheduler_daemon.services.deliverer import Deliverer, DeliveryResult
from tests.support import NotificationReceiver, RawReceiver, query, shell_task, wait_for

DEADLINE = 3.0  # the deliverer's POST deadline in these tests; the drip's byte every second
# would hold a per-read timeout of 3 s for ever


def _task_notifying(client: Any, url: str, notify_url: str, name: str) -> int:
    task = shell_task(client, name)
    query(url, "UPDATE task SET notify_url = %s WHERE id = %s RETURNING id", (notify_url, task.id))
    return int(task.id)


def _rows(url: str, task_id: int, count: int, *, due_seconds_ago: float) -> list[int]:
    """`count` due `deadline` notifications of `task_id` (firings not recorded, so no
    occurrence is needed), due `due_seconds_ago` seconds ago, each a second apart."""
    rows = query(
        url,
        "INSERT INTO notification_outbox (occurrence_id, task_id, scheduled_for, event, payload,"
        " created_at, next_attempt_at)"
        " SELECT NULL, %(task)s, now() - make_interval(hours => g), 'deadline',"
        " jsonb_build_object('event', 'deadline', 'task_id', %(task)s), clock_timestamp(),"
        " clock_timestamp() - make_interval(secs => %(ago)s)"
        " FROM generate_series(1, %(count)s) g RETURNING id",
        {"task": task_id, "count": count, "ago": due_seconds_ago},
    )
    return [r["id"] for r in rows]


def _outbox(url: str, ids: list[int]) -> list[dict[str, Any]]:
    return query(
        url,
        "SELECT id, attempts, delivered_at, last_error,"
        " extract(epoch FROM next_attempt_at - clock_timestamp())::float8 AS due_in"
        " FROM notification_outbox WHERE id = ANY(%s) ORDER BY id",
        (ids,),
    )


def _delivered(url: str, ids: list[int]) -> bool:
    return all(r["delivered_at"] is not None for r in _outbox(url, ids))


def _pass_in_background(deliverer: Deliverer) -> tuple[threading.Thread, list[DeliveryResult]]:
    results: list[DeliveryResult] = []
    thread = threading.Thread(target=lambda: results.append(deliverer.run_once()), daemon=True)
    thread.start()
    return thread, results


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)  # loopback only, never through a proxy


@pytest.fixture
def drip() -> Any:
    receiver = RawReceiver(lambda send: None)
    receiver.drip(every=1.0)
    yield receiver
    receiver.close()


@pytest.fixture
def healthy() -> Any:
    receiver = NotificationReceiver()
    yield receiver
    receiver.close()


def _slow_then_fast(client: Any, url: str, slow: tuple[Any, int], fast: tuple[Any, int]) -> Any:
    """Each of `slow` and `fast` is (a receiver, a count): that many due outbox rows of a task
    notifying the receiver, the slow one's due 60 s ago, the fast one's 30 s ago (behind)."""
    rows = []
    for (receiver, count), name, ago in ((slow, "slow", 60), (fast, "fast", 30)):
        task_id = _task_notifying(client, url, receiver.url, name)
        rows.append(_rows(url, task_id, count, due_seconds_ago=ago))
    return rows


def _delivered_meanwhile(pool: Any, url: str, fast: Any, when: str) -> Any:
    """Starts a deliverer's pass (DEADLINE per POST) in the background and waits, less than
    the deadline, until the rows `fast` are delivered (`when` says while what): (its thread,
    its results)."""
    thread, results = _pass_in_background(Deliverer(pool, instance_id="d", timeout=DEADLINE))
    wait_for(
        lambda: _delivered(url, fast),
        timeout=DEADLINE - 0.5,
        message=f"the healthy receiver's rows, delivered {when}",
    )
    return thread, results


def test_a_dripping_receiver_is_cut_at_the_deadline_while_other_rows_are_delivered(
    client, pool, database_url, drip, healthy
) -> None:
    """A receiver sending a byte a second, its row the oldest: its POST ends `timed out` at the
    deadline, and the five rows behind it, to another receiver, are delivered meanwhile. The
    old deliverer (one POST at a time, a per-read timeout, the body read to its end) held its
    only thread on the drip for as long as the receiver dripped: nothing else went out."""
    slow, fast = _slow_then_fast(client, database_url, (drip, 1), (healthy, 5))
    started = time.monotonic()
    thread, results = _delivered_meanwhile(pool, database_url, fast, "while the drip is held")
    assert drip.requests == 1
    thread.join(timeout=DEADLINE + 2)
    elapsed = time.monotonic() - started
    assert not thread.is_alive(), "the dripping POST outlived its deadline"
    assert elapsed < DEADLINE + 1.5
    ((row,),) = [_outbox(database_url, slow)]
    assert (row["attempts"], row["delivered_at"]) == (1, None)
    assert row["last_error"] == "timed out after 3 s"
    (result,) = results
    assert (result.delivered, result.failed) == (5, 1)


def test_one_receiver_holds_at_most_three_of_the_four_workers(
    client, pool, database_url, drip, healthy
) -> None:
    """Four rows for the dripping receiver, older than one for a healthy one: three POSTs go
    to the drip at once, the fourth waits, and the healthy row is delivered at once. Would
    fail with a single worker (the old deliverer), and with four workers and no cap per URL
    (all four held by the drip)."""
    slow, fast = _slow_then_fast(client, database_url, (drip, 4), (healthy, 1))
    thread, results = _delivered_meanwhile(pool, database_url, fast, "while the drip holds 3")
    assert drip.requests == 3
    thread.join(timeout=DEADLINE + 2)
    assert not thread.is_alive()
    (result,) = results
    assert (result.delivered, result.failed) == (1, 3)
    waiting = [r for r in _outbox(database_url, slow) if r["attempts"] == 0]
    assert len(waiting) == 1  # left for the next pass, not held behind the drip


def test_a_nul_in_the_receivers_status_line_is_recorded_with_its_back_off(
    client, pool, database_url
) -> None:
    """`HTTP/1.1 5\\0 0 ...`: the POST's error quotes the status line, NUL and all. The old
    deliverer handed that to `outbox_failed`, PostgreSQL refused the text, the pass failed,
    and the row came back every lease (15 s) for ever with no error saved. Now the error is
    stored mended and the row waits its back-off (1 s after a first failure)."""
    receiver = RawReceiver(lambda send: bool(send(b"HTTP/1.1 5\x000 Bad\x00Thing\r\n\r\n")))
    try:
        ids = _rows(
            database_url,
            _task_notifying(client, database_url, receiver.url, "nul"),
            1,
            due_seconds_ago=1,
        )
        result = Deliverer(pool, instance_id="d", timeout=DEADLINE).run_once()
    finally:
        receiver.close()
    assert (result.delivered, result.failed, result.unrecorded) == (0, 1, 0)
    (row,) = _outbox(database_url, ids)
    assert row["attempts"] == 1
    assert row["last_error"].startswith("BadStatusLine: HTTP/1.1 5\ufffd0 Bad\ufffdThing")
    assert 0 < row["due_in"] <= 1.5  # the back-off, not the lease


def test_a_record_the_database_refuses_becomes_the_rows_error_and_the_others_go_on(
    client, pool, database_url, healthy
) -> None:
    """A trigger refuses to mark one row delivered (standing for any refusal of a record): that
    row is recorded failed instead, why and its back-off saved, and the other rows of the pass
    are delivered. The old deliverer let the refusal fail the whole pass: the rows after it
    waited for the next pass and the refused one came back every lease with no error."""
    task = _task_notifying(client, database_url, healthy.url, "refused")
    refused, *others = _rows(database_url, task, 3, due_seconds_ago=10)
    query(
        database_url,
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " IF NEW.delivered_at IS NOT NULL AND NEW.id = " + str(refused) + " THEN"
        " RAISE EXCEPTION 'refused by a test'; END IF; RETURN NEW; END $$;"
        " CREATE TRIGGER refuse BEFORE UPDATE ON notification_outbox"
        " FOR EACH ROW EXECUTE FUNCTION refuse(); SELECT 1 AS done",
    )
    result = Deliverer(pool, instance_id="d", timeout=DEADLINE).run_once()
    assert (result.delivered, result.failed) == (2, 1)
    row, *rest = _outbox(database_url, [refused, *others])
    assert (row["attempts"], row["delivered_at"]) == (1, None)
    assert "its record failed" in row["last_error"]
    assert "refused by a test" in row["last_error"]
    assert 0 < row["due_in"] <= 1.5
    assert all(r["delivered_at"] is not None for r in rest)


def test_a_row_whose_payload_is_too_deep_to_decode_is_recorded_with_its_error(
    client, pool, database_url, healthy
) -> None:
    """A payload nested 2,000 deep (the owner's SQL: the column allows it): the claim reads it
    as text, the row is recorded failed with why and its back-off, unsent, and the row after
    it is delivered. The old claim decoded the jsonb in the driver, raised RecursionError
    after the claim's own statement, rolled back, and took the same row first every pass:
    no notification went out again."""
    task = _task_notifying(client, database_url, healthy.url, "deep")
    deep, fine = _rows(database_url, task, 2, due_seconds_ago=10)
    nested = "[" * 2000 + "]" * 2000
    query(
        database_url,
        "UPDATE notification_outbox SET payload = %s::jsonb WHERE id = %s RETURNING id",
        (nested, deep),
    )
    result = Deliverer(pool, instance_id="d", timeout=DEADLINE).run_once()
    assert (result.delivered, result.failed) == (1, 1)
    bad, good = _outbox(database_url, [deep, fine])
    assert (bad["attempts"], bad["delivered_at"]) == (1, None)
    assert "cannot be read" in bad["last_error"]
    assert 0 < bad["due_in"] <= 1.5
    assert good["delivered_at"] is not None
    assert len(healthy.received) == 1
