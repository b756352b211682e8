"""The waker's lifecycle without a database: the daemon stops it whether or not it started."""

import threading

from scheduler_daemon.services.waker import Waker


def test_a_waker_that_never_started_stops_quietly() -> None:
    # With --no-listen the daemon never starts its waker but stops it at shutdown like the other
    # services; a join on the unstarted thread raised, so every --no-listen daemon exited 1 after
    # its drain, without stopping its lease keeper or deregistering.
    waker = Waker("postgresql://unused", threading.Event(), instance_id="t")
    waker.stop()
    waker.stop()  # and again: stop is idempotent
