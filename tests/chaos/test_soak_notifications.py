"""The soak's notification verdict (tests/chaos/soak_notifications.py) on a real daemon's
deliveries: clean as delivered, and reporting each way a notification can go wrong when the
history or the receiver's records are spoiled afterwards, so a green soak means every owed
notification really arrived with its one id."""

import copy
from collections.abc import Iterator

import pytest

from tests.chaos.soak_notifications import Verdict, drain
from tests.support import NotificationReceiver, query

pytestmark = pytest.mark.slow
NO_PROXY = {"no_proxy": "*", "NO_PROXY": "*"}
NAMES = ["notify-a", "notify-b"]


@pytest.fixture
def receiver() -> Iterator[NotificationReceiver]:
    receiver = NotificationReceiver(fail=1)  # every notification retried once
    yield receiver
    receiver.close()


def test_the_verdict_is_clean_on_real_deliveries_and_reports_each_spoiled_record(
    spawn, cli, database_url, receiver: NotificationReceiver
) -> None:
    for name in NAMES:
        added = cli(
            "tasks",
            *("add", name, "--every", "1h", "--command", "exit 3", "--overlap", "allow"),
            *("--notify", receiver.url, "--notify-on", "failure,deadline", "--deadline", "1s"),
        )
        assert added.code == 0, added.err
    daemon = spawn(database_url, "a", env=NO_PROXY)
    try:
        daemon.instance_id()
        for name in NAMES:
            assert cli("tasks", "trigger", name).code == 0
        left = drain(database_url, cli, NAMES, timeout=60)
    finally:
        assert daemon.stop() == 0, daemon.log()
    assert left["seconds"] < 60, left
    received = receiver.received
    clean = Verdict(database_url, NAMES, received)
    assert clean.problems == []
    assert clean.figures()["by_event"] == {"failure": 2, "deadline": 2}
    assert clean.figures()["repeats"] == 4  # the first POST of each answered 500

    rows = clean.rows
    lost = rows[0]["delivery_id"]
    dropped = [p for p in received if p["body"]["delivery_id"] != lost]
    assert _problems(database_url, dropped) == [
        f"outbox row {rows[0]['id']} (occurrence {rows[0]['occurrence_id']}, "
        f"{rows[0]['event']}) never received (delivery_id {lost})",
        f"{len(rows) - 1} distinct delivery ids received for {len(rows)} outbox rows",
    ]

    refused = [p if p["status"] == 500 else {**p, "status": 500} for p in received]
    assert all("never answered 200" in p for p in _problems(database_url, refused))

    rekeyed = copy.deepcopy(received)
    rekeyed[-1]["headers"]["Idempotency-Key"] = "another"
    (problem,) = _problems(database_url, rekeyed)
    assert "with Idempotency-Key another" in problem

    # A second id for one (occurrence, event): the row's payload, another id.
    twice = copy.deepcopy(received)
    twice[-1]["body"]["delivery_id"] = "00000000-0000-0000-0000-000000000000"
    twice[-1]["headers"]["Idempotency-Key"] = "00000000-0000-0000-0000-000000000000"
    problems = _problems(database_url, twice)
    assert any("that no outbox row holds" in p for p in problems)
    assert any("came with 2 delivery ids" in p for p in problems)

    other = copy.deepcopy(received)
    other[-1]["body"]["occurrence_id"] = -1
    (problem,) = _problems(database_url, other)
    assert "says occurrence/task/event [-1," in problem

    unmark = "UPDATE notification_outbox SET delivered_at = NULL WHERE id = %s"
    query(database_url, unmark, (rows[1]["id"],))
    (problem,) = _problems(database_url, received)
    assert problem.endswith("never marked delivered")

    query(database_url, "DELETE FROM notification_outbox WHERE id = %s", (rows[1]["id"],))
    problems = _problems(database_url, received)
    assert f"occurrence {rows[1]['occurrence_id']} owes a {rows[1]['event']!r}" in problems[0]
    assert any("that no outbox row holds" in p for p in problems)


def _problems(url: str, received: list[dict]) -> list[str]:
    return Verdict(url, NAMES, received).problems
