"""Liveness from loop progress and readiness from the database check, on a clock the test moves;
and the endpoint that serves them, on a real loopback socket."""

from prometheus_client import CollectorRegistry

from scheduler_daemon.runtime.endpoint import Endpoint
from scheduler_daemon.runtime.health import LoopProgress, Readiness
from scheduler_daemon.settings import DaemonSettings
from tests.support import http_get


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_stall_bound_is_the_poll_interval_plus_the_pass_bound() -> None:
    settings = DaemonSettings(poll_interval=DaemonSettings.poll_interval * 5)
    assert settings.stall_timeout.total_seconds() == 5 + 90


def test_the_loop_is_stuck_only_when_no_iteration_completed_within_the_bound() -> None:
    clock = Clock()
    progress = LoopProgress(91.0, clock=clock)
    clock.now += 91
    assert progress.problem() is None
    clock.now += 1
    assert progress.problem() == (
        "stuck: no loop iteration completed for 92s (bound 91s: poll interval + 90s pass bound)"
    )
    pinged: list[float] = []
    progress.on_progress.append(lambda: pinged.append(clock.now))
    progress.tick()
    assert progress.problem() is None
    assert pinged == [clock.now]


def test_readiness_says_starting_then_asks_the_database_at_most_once_per_ttl() -> None:
    clock = Clock()
    answers = iter(["database unavailable: connection refused", None, None])
    calls: list[float] = []

    def check() -> str | None:
        calls.append(clock.now)
        return next(answers)

    readiness = Readiness(check, ttl=1.0, clock=clock)
    assert readiness.problem() == "starting: waiting for the database"
    assert calls == []
    readiness.state = None
    assert readiness.problem() == "database unavailable: connection refused"
    assert readiness.problem() == "database unavailable: connection refused"  # cached
    clock.now += 1
    assert readiness.problem() is None
    readiness.state = "draining"
    assert readiness.problem() == "draining"
    assert len(calls) == 2


def test_a_check_that_raises_is_a_reason_not_a_crash() -> None:
    def check() -> str | None:
        raise RuntimeError("surprise")

    readiness = Readiness(check)
    readiness.state = None
    assert readiness.problem() == "database check failed: RuntimeError"


def test_the_endpoint_answers_503_with_the_reason_while_the_loop_is_stuck() -> None:
    clock = Clock()
    progress = LoopProgress(10.0, clock=clock)
    endpoint = Endpoint(
        "127.0.0.1",
        0,
        liveness=progress.problem,
        readiness=lambda: None,
        registry=CollectorRegistry(),
    )
    endpoint.start()
    try:
        port = endpoint.address[1]
        assert http_get(port, "/healthz") == (200, "ok\n")
        clock.now += 11
        code, body = http_get(port, "/healthz")
        assert code == 503
        assert body.startswith("stuck: no loop iteration completed for 11s")
        assert http_get(port, "/readyz") == (200, "ready\n")
    finally:
        endpoint.stop()
