"""Who wakes the other daemons: a loop that claims right after its dispatch or its completions
wakes its peers only for what it cannot take itself. Each woken peer takes the fleet budget's
lock to claim nothing, in line with the claim that has real work (the start lag of a firing)."""

import time
from typing import Any

import psycopg
import pytest

from scheduler_daemon.storage import instance_store
from tests.support import Replica, query, shell_task


@pytest.fixture
def listener(database_url: str) -> Any:
    with psycopg.connect(database_url, autocommit=True) as conn:
        instance_store.listen_wakeups(conn)
        yield conn


def _wakeups(listener: psycopg.Connection[Any]) -> list[str]:
    return [n.payload for n in listener.notifies(timeout=0.2, stop_after=10)]


def _due_now(database_url: str, *names: str) -> None:
    query(
        database_url,
        "UPDATE task SET next_run_at = now() - interval '1 second' WHERE name = ANY(%s) "
        "RETURNING id",
        (list(names),),
    )


def test_a_dispatch_wakes_the_peers_only_for_what_its_own_claim_cannot_start(
    client, pool, executors, database_url, listener
) -> None:
    for name in ("a", "b", "c"):
        shell_task(client, name)
    _wakeups(listener)  # the task_added ones
    replica = Replica(database_url, pool, executors, "r")
    _due_now(database_url, "a")
    assert replica.dispatcher.run_once(claims_after=1).queued == 1
    assert _wakeups(listener) == []  # its own claim takes it
    _due_now(database_url, "b", "c")
    assert replica.dispatcher.run_once(claims_after=1).queued == 2
    assert _wakeups(listener) == ["queued"]  # one more than it can start itself


def test_successes_wake_the_peers_unless_the_loop_claims_right_after(
    client, pool, executors, database_url, listener
) -> None:
    task = shell_task(client, overlap="allow")
    for _ in range(4):
        client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "r")
    _wakeups(listener)
    assert replica.launcher.run_once().launched == 4
    rest = replica.finished()[2:]
    for run in rest:
        run.retry_at = time.monotonic() + 60  # held back: written by the second pass
    first_pass = replica.completer.run_once(wake_peers=False)
    assert (first_pass.done, first_pass.fenced) == (2, 0)
    assert _wakeups(listener) == []
    for run in rest:
        run.retry_at = 0.0
    assert replica.completer.run_once().done == 2  # a drain's pass: nobody claims after it
    assert _wakeups(listener) == ["finished"]
    statuses = query(database_url, "SELECT status FROM occurrence")
    assert [r["status"] for r in statuses] == ["success"] * 4


def test_a_waker_on_a_direct_connection_hears_its_own_probe_and_keeps_listening(
    database_url: str, listener: psycopg.Connection[Any]
) -> None:
    # The self-check must not give LISTEN up where it works, and every listener (this one and
    # the peers) ignores the probe instead of taking it for work.
    import threading

    from structlog.testing import capture_logs

    from scheduler_daemon.services.waker import PROBE, PROBE_SECONDS, Waker

    wake, launch = threading.Event(), threading.Event()
    waker = Waker(database_url, wake, instance_id="w", launch_wanted=launch)
    with capture_logs() as logs:
        waker.start()
        probes = [p for p in _wakeups(listener) if p.startswith(f"{PROBE} w ")]
        deadline = time.monotonic() + 5
        while not probes and time.monotonic() < deadline:
            probes = [p for p in _wakeups(listener) if p.startswith(f"{PROBE} w ")]
        assert probes, "the waker never probed its LISTEN"
        # Past the probe's window (a negative cannot be polled for): a waker that gave up has
        # unlistened by then, and the wake-up below would not reach it.
        time.sleep(PROBE_SECONDS + 0.2)
        assert not wake.is_set()  # its own probe is not work
        assert not launch.is_set()
        with psycopg.connect(database_url, autocommit=True) as conn:
            instance_store.notify_wakeup(conn, "queued")
        assert wake.wait(5)  # still listening
        assert launch.is_set()
        waker.stop()
    assert [e for e in logs if e["event"] == "listen_unavailable"] == []


def test_a_dispatch_says_whether_a_queued_occurrence_may_start_by_now(
    client, pool, executors, database_url
) -> None:
    """What the loop claims on when no wake-up came (issue 33 item 3): nothing queued, or only a
    retry still backing off, is no reason to take the budget's lock; a backoff that ended is."""
    task = shell_task(client)
    replica = Replica(database_url, pool, executors, "r")
    assert replica.dispatcher.run_once().queue_due is False
    client.trigger(task.id, requested_by="test")
    query(database_url, "UPDATE occurrence SET not_before = now() + interval '1 hour' RETURNING 1")
    assert replica.dispatcher.run_once().queue_due is False
    query(database_url, "UPDATE occurrence SET not_before = now() - interval '1 ms' RETURNING 1")
    assert replica.dispatcher.run_once().queue_due is True
