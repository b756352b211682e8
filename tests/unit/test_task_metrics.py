"""The per-task gauges' collector (runtime/task_metrics.py) over a sample function and a stepped
clock: one read per interval however many scrapes, the last sample served when a read fails, the
families exported (empty) before any sample; and the lost firings' reason kept bounded."""

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from scheduler_daemon.domain.task_figures import OTHER_TASK, TaskFigures, lost_by_reason
from scheduler_daemon.runtime.task_metrics import TaskGauges


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Reads:
    """A sample function that counts its calls and fails while `failing` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.failures = 0
        self.failing = False

    def __call__(self) -> Any:
        self.calls += 1
        if self.failing:
            raise ConnectionError("the database is away")
        figures = [
            TaskFigures("nightly", 10.0, 20.0, 30.0, 1, self.failures),
            TaskFigures(OTHER_TASK, None, None, None, 2, 0),
        ]
        return figures, {("nightly", "overlap"): 3}


def _scrape(registry: CollectorRegistry) -> dict[str, list[Any]]:
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        samples.setdefault(family.name, []).extend(family.samples)
    return samples


def _gauges(reads: Reads | None, clock: Clock) -> tuple[TaskGauges, CollectorRegistry]:
    gauges = TaskGauges(reads, interval=15.0, clock=clock)
    registry = CollectorRegistry()
    registry.register(gauges)
    return gauges, registry


def test_scrapes_within_the_interval_share_one_read() -> None:
    reads, clock = Reads(), Clock()
    _, registry = _gauges(reads, clock)
    first = _scrape(registry)
    reads.failures = 4
    clock.now += 14.9
    second = _scrape(registry)
    assert reads.calls == 1
    failures = "scheduler_daemon_task_consecutive_failures"
    assert [s.value for s in second[failures]] == [0, 0]
    (age,) = second["scheduler_daemon_task_sample_age_seconds"]
    assert age.value == pytest.approx(14.9)
    assert first[failures] == second[failures]
    clock.now += 0.1
    third = _scrape(registry)
    assert reads.calls == 2
    assert {s.labels["task"]: s.value for s in third[failures]} == {"nightly": 4, OTHER_TASK: 0}


def test_the_other_label_has_no_times_and_each_family_its_labels() -> None:
    _, registry = _gauges(Reads(), Clock())
    samples = _scrape(registry)
    success = samples["scheduler_daemon_task_last_success_timestamp_seconds"]
    assert [(s.labels, s.value) for s in success] == [({"task": "nightly"}, 10.0)]
    running = samples["scheduler_daemon_task_running"]
    assert {s.labels["task"]: s.value for s in running} == {"nightly": 1, OTHER_TASK: 2}
    (lost,) = samples["scheduler_daemon_task_lost_firings"]
    assert (lost.labels, lost.value) == ({"task": "nightly", "reason": "overlap"}, 3)


def test_a_failed_read_serves_the_last_sample_and_waits_an_interval_to_try_again() -> None:
    reads, clock = Reads(), Clock()
    _, registry = _gauges(reads, clock)
    _scrape(registry)
    reads.failing = True
    clock.now += 15
    served = _scrape(registry)  # the read fails: the last sample, 15 s old
    assert reads.calls == 2
    (age,) = served["scheduler_daemon_task_sample_age_seconds"]
    assert age.value == 15
    assert len(served["scheduler_daemon_task_running"]) == 2
    clock.now += 5
    _scrape(registry)
    assert reads.calls == 2  # no retry on every scrape during an outage
    reads.failing = False
    clock.now += 10
    (age,) = _scrape(registry)["scheduler_daemon_task_sample_age_seconds"]
    assert (reads.calls, age.value) == (3, 0)


def test_a_scrape_during_a_read_serves_the_last_sample_without_waiting() -> None:
    reads, clock = Reads(), Clock()
    gauges, registry = _gauges(None, clock)
    gauges.attach(reads)
    _scrape(registry)
    seen: list[dict[str, list[Any]]] = []

    def slow_read() -> Any:  # another scrape arrives while this read is in flight
        seen.append(_scrape(registry))
        return reads()

    gauges.attach(slow_read)
    reads.failures = 7
    clock.now += 15
    after = _scrape(registry)
    (during,) = seen
    failures = "scheduler_daemon_task_consecutive_failures"
    assert {s.labels["task"]: s.value for s in during[failures]}["nightly"] == 0
    assert {s.labels["task"]: s.value for s in after[failures]}["nightly"] == 7
    assert reads.calls == 2


def test_without_a_sample_the_families_are_served_empty() -> None:
    gauges, registry = _gauges(None, Clock())
    samples = _scrape(registry)
    assert samples["scheduler_daemon_task_running"] == []
    (age,) = samples["scheduler_daemon_task_sample_age_seconds"]
    assert age.value != age.value  # NaN: never read
    reads = Reads()
    gauges.attach(reads)
    assert len(_scrape(registry)["scheduler_daemon_task_running"]) == 2


def test_a_reason_outside_the_vocabulary_is_counted_as_other() -> None:
    rows = [
        {"task": "a", "reason": "overlap", "firings": 2},
        {"task": "a", "reason": "written by hand", "firings": 1},
        {"task": "a", "reason": None, "firings": 1},
        {"task": "a", "reason": "other", "firings": 1},
        {"task": "b", "reason": "start_deadline", "firings": 7},
    ]
    assert lost_by_reason(rows) == {
        ("a", "overlap"): 2,
        ("a", "other"): 3,
        ("b", "start_deadline"): 7,
    }
