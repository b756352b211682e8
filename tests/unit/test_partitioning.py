"""The partition interval's bounds and the 1,000-partition cap (domain/partitioning.py), and the
keeper's pacing and its retries on a held lock (services/partition_keeper.py), without a
database: the function's answers are given."""

from contextlib import contextmanager
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from scheduler_daemon.domain import partitioning
from scheduler_daemon.services import partition_keeper
from scheduler_daemon.services.partition_keeper import PartitionKeeper, UpkeepFailed


@pytest.mark.parametrize(
    "given", [timedelta(seconds=30), timedelta(days=32), timedelta(seconds=90)]
)
def test_an_interval_outside_its_bounds_or_not_whole_minutes_is_refused(given: timedelta) -> None:
    with pytest.raises(partitioning.BadPartitioning):
        partitioning.check_interval(given)


def test_the_bounds_themselves_are_taken() -> None:
    assert partitioning.check_interval(timedelta(minutes=1)) == timedelta(minutes=1)
    assert partitioning.check_interval(timedelta(days=31)) == timedelta(days=31)


def test_a_retention_spans_at_most_1000_partitions_of_the_interval() -> None:
    partitioning.check_count(timedelta(days=1000), None)  # the default interval, 1 day
    partitioning.check_count(None, timedelta(minutes=1))  # no retention: nothing dropped
    with pytest.raises(partitioning.BadPartitioning, match="1,001 partitions"):
        partitioning.check_count(timedelta(days=1000, hours=1), None)  # rounded up
    with pytest.raises(partitioning.BadPartitioning, match="1,440 partitions"):
        partitioning.check_count(timedelta(days=1), timedelta(minutes=1))


def test_the_margin_is_three_intervals_or_an_hour() -> None:
    assert partitioning.ahead(timedelta(minutes=1)) == timedelta(hours=1)
    assert partitioning.ahead(None) == timedelta(days=3)


def _keeper(
    monkeypatch: pytest.MonkeyPatch, answers: list[dict[str, Any]], now: list[float] | None = None
) -> PartitionKeeper:
    """A keeper whose transactions answer `answers` in turn, on the clock `now[0]`."""

    @contextmanager
    def transaction(_pool: Any) -> Any:
        yield SimpleNamespace(conn=None)

    monkeypatch.setattr(partition_keeper, "transaction", transaction)
    monkeypatch.setattr(partition_keeper.partition_store, "upkeep", lambda _conn: answers.pop(0))
    clock = now if now is not None else [0.0]
    pool: Any = None  # never used: transaction is replaced
    return PartitionKeeper(pool, instance_id="t", clock=lambda: clock[0], sleep=lambda _s: None)


LOCKED = {"error": "canceling statement due to lock timeout", "sqlstate": "55P03"}


def test_a_held_lock_is_tried_twice_more_before_it_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = [LOCKED, LOCKED, {"created": [], "dropped": [], "partitions_ahead": 4}]
    assert _keeper(monkeypatch, answers).run_once()["partitions_ahead"] == 4
    assert answers == []
    answers = [LOCKED, LOCKED, LOCKED, {"created": []}]
    with pytest.raises(UpkeepFailed, match="55P03"):
        _keeper(monkeypatch, answers).run_once()
    assert len(answers) == 1  # three tries, no more


def test_another_error_is_not_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = [{"error": "boom", "sqlstate": "XX000"}, {"created": []}]
    with pytest.raises(UpkeepFailed, match="XX000"):
        _keeper(monkeypatch, answers).run_once()
    assert len(answers) == 1


def test_a_daemon_keeps_up_at_most_once_a_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = [{"partitions_ahead": 1}, {"partitions_ahead": 3}]
    now = [0.0]
    keeper = _keeper(monkeypatch, answers, now)
    assert keeper.maybe_run() == {"partitions_ahead": 1}
    assert partitioning.too_few_ahead(keeper.partitions_ahead)
    now[0] = 59.0
    assert keeper.maybe_run() is None
    now[0] = 60.0
    assert keeper.maybe_run() == {"partitions_ahead": 3}
    assert not partitioning.too_few_ahead(keeper.partitions_ahead)
