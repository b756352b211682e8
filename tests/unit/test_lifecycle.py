"""The one lifecycle of the threaded services (scheduler_daemon/lifecycle.py, ADR 0032)."""

import threading
import time
from collections.abc import Callable

from scheduler_daemon.lifecycle import Backoff, ThreadedService


def test_a_backoff_doubles_up_to_its_most_and_starts_again_after_a_reset() -> None:
    backoff = Backoff(1.0, 5.0)
    assert [backoff.next() for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    backoff.reset()
    assert backoff.next() == 1.0
    assert backoff.current == 2.0


class Worker(ThreadedService):
    """Runs until stopped, or ends on its own once `end` is set (a death, as the daemon sees it)."""

    stop_timeout = 2.0

    def __init__(self) -> None:
        super().__init__("worker")
        self.end = threading.Event()
        self.runs = 0
        self.stopped_with: float | None = None

    def _run(self) -> None:
        self.runs += 1
        while not self.stop_requested.wait(0.01):
            if self.end.is_set():
                return

    def _stopped(self, deadline: float) -> None:
        self.stopped_with = deadline


def wait_until(condition: Callable[[], bool], seconds: float = 2.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.01)


def test_a_dead_thread_is_not_alive_and_restart_puts_a_named_one_in_its_place() -> None:
    worker = Worker()
    assert worker.alive
    assert not worker.started
    worker.start()
    assert worker._thread.name == "worker"
    assert worker._thread.daemon
    first = worker._thread
    worker.restart()  # a live thread is left alone
    assert worker._thread is first
    worker.end.set()
    wait_until(lambda: not worker._thread.is_alive())
    assert not worker.alive
    worker.end.clear()
    worker.restart()
    wait_until(lambda: worker.runs == 2)
    assert worker.alive
    assert worker._thread.name == "worker"
    worker.stop()


def test_stop_ends_the_thread_then_closes_within_the_same_deadline_and_forbids_restart() -> None:
    worker = Worker()
    worker.start()
    before = time.monotonic()
    worker.stop()
    assert not worker._thread.is_alive()
    assert worker.stopped_with is not None
    assert before + Worker.stop_timeout <= worker.stopped_with <= time.monotonic() + 2.0
    assert worker.alive  # stopped, not dead
    worker.restart()
    assert not worker._thread.is_alive()
    assert worker.runs == 1


def test_a_service_never_started_stops_without_waiting() -> None:
    worker = Worker()
    worker.stop()  # `--no-listen`: the waker is never started
    assert worker.stopped_with is not None
    assert not worker.started
