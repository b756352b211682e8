"""In-process jobs through the real launcher, lease keeper, completer and drain against a real
database: a timed-out job that ignores the request keeps its run, lease and slot until it
returns and then records `timeout`; the drain records a job still running at exit `interrupted`
and queues it again no earlier than twice the poll interval later (ADR 0009).

The replica maps the "python" executor kind to an InProcessExecutor: the composition a task's
`in_process` flag selects in the launcher (issue 33, the claim's routing), made by hand here so
these tests need nothing but the executor."""

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.executors.inprocess import ABANDONED_ERROR, InProcessExecutor
from scheduler_daemon.runtime.drain import Drain
from scheduler_daemon.runtime.health import LoopProgress, Readiness
from scheduler_daemon.runtime.metrics import Metrics
from scheduler_daemon.runtime.notify import Notifier
from tests import inprocess_jobs
from tests.support import SETTINGS, Replica, query, wait_for


@pytest.fixture
def in_process() -> Iterator[InProcessExecutor]:
    inprocess_jobs.RELEASE.clear()
    executor = InProcessExecutor(threading.Event(), threads=4, stop_grace=30.0)
    yield executor
    inprocess_jobs.RELEASE.set()
    wait_for(lambda: not executor.running(), timeout=10, message="in-process jobs to return")
    executor.close()


def _launched(client: Any, pool: Any, url: str, executor: InProcessExecutor, **kw: Any) -> Any:
    task = client.add_task(
        TaskSpec(
            name="inproc",
            executor="python",
            target="tests.inprocess_jobs:stubborn",
            every=timedelta(hours=1),
            **kw,
        )
    )
    client.trigger(task.id, requested_by="test")
    replica = Replica(url, pool, {"python": executor}, "a")
    assert replica.launcher.run_once().launched == 1
    (run,) = list(replica.held)
    return replica, run


def _run_row(url: str, run_id: int) -> dict[str, Any]:
    (row,) = query(
        url,
        "SELECT r.status, r.lease_expires_at, r.error, r.finished_at, o.status AS occ_status, "
        "o.not_before FROM run r JOIN occurrence o ON o.id = r.occurrence_id WHERE r.id = %s",
        (run_id,),
    )
    return row


def test_a_timed_out_job_that_ignores_the_stop_keeps_its_renewed_run_until_it_returns(
    client: Any, pool: Any, database_url: str, in_process: InProcessExecutor
) -> None:
    """An executor that reported `timeout` at its timeout, as the process executors do after
    their kill, would free the slot and the occurrence (a retry could start) while the thread
    still runs: here the run stays `running`, renewed, until the job returns."""
    replica, run = _launched(client, pool, database_url, in_process, timeout=timedelta(seconds=1))
    wait_for(run.job.ctx.cancelled.is_set, timeout=10, message="the timeout's stop request")
    before = _run_row(database_url, run.run_id)

    assert replica.completer.run_once().done == 0
    assert replica.keeper.run_once() == set()  # renewed, not fenced
    after = _run_row(database_url, run.run_id)
    assert (after["status"], after["occ_status"]) == ("running", "running")
    assert after["lease_expires_at"] > before["lease_expires_at"]
    assert len(replica.held) == 1  # its slot

    inprocess_jobs.RELEASE.set()
    wait_for(run.job.poll, timeout=10, message="the job to return")
    assert replica.completer.run_once().done == 1
    ended = _run_row(database_url, run.run_id)
    assert (ended["status"], ended["error"]) == ("timeout", "timed out after 1 s")


def test_the_drain_requeues_an_in_process_job_still_running_two_poll_intervals_later(
    client: Any, pool: Any, database_url: str, in_process: InProcessExecutor
) -> None:
    """Fails on a drain that writes it as a process job's interruption (queued at once): a peer
    could start the retry while this thread still runs, until the process is gone."""
    replica, run = _launched(client, pool, database_url, in_process)
    wait_for(lambda: "ignoring stops" in run.job.tail.text(), timeout=10)
    drain = Drain(
        instance_id="a",
        settings=SETTINGS,
        held=replica.held,
        wake=threading.Event(),
        progress=LoopProgress(60.0),
        readiness=Readiness(lambda: None),
        metrics=Metrics("a", "test", SETTINGS.concurrency),
        notifier=Notifier(None, None),
    )

    drain.end_in_process(in_process, replica.completer)

    row = _run_row(database_url, run.run_id)
    assert (row["status"], row["occ_status"], row["error"]) == (
        "interrupted",
        "queued",
        ABANDONED_ERROR,
    )
    assert row["not_before"] >= row["finished_at"] + 2 * SETTINGS.poll_interval
    assert run.job.ctx.cancelled.is_set()
    assert len(replica.held) == 0
