"""A real daemon starts its python workers with itself when some task runs python jobs, so the
first burst of jobs does not pay for starting them; with none, it starts none (idle workers
cost memory a fleet of shell tasks would pay for nothing)."""

from datetime import timedelta
from pathlib import Path

import pytest

from scheduler_daemon.domain.task import TaskSpec
from tests.support import query, wait_for

pytestmark = pytest.mark.slow


def _python_workers(pid: int) -> set[int]:
    """The daemon's python worker processes (its children running the worker module)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    found = set()
    for child in children:
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if b"scheduler_daemon.executors.python_worker" in cmdline:
            found.add(int(child))
    return found


def _spec(name: str, **kw: object) -> TaskSpec:
    return TaskSpec(name=name, every=timedelta(hours=1), paused=True, **kw)  # type: ignore[arg-type]


def test_the_python_workers_start_with_the_daemon_when_a_python_task_exists(
    client, spawn, database_url
) -> None:
    client.add_task(_spec("py", executor="python", target="tests.jobs:ok"))

    daemon = spawn(database_url, "w", "--concurrency", "3")

    # No job has run, nor been triggered: these were started with the daemon.
    workers = wait_for(
        lambda: len(found := _python_workers(daemon.pid)) == 3 and found, message="3 workers"
    )
    assert query(database_url, "SELECT count(*) AS n FROM run")[0]["n"] == 0
    client.trigger("py", requested_by="test")
    wait_for(lambda: query(database_url, "SELECT status FROM run WHERE status = 'success'"))
    assert _python_workers(daemon.pid) == workers  # the job ran on one of them


def test_a_daemon_with_no_python_task_starts_no_python_worker(client, spawn, database_url) -> None:
    client.add_task(_spec("sh", executor="shell", target="true"))
    daemon = spawn(database_url, "w", "--concurrency", "3")

    client.trigger("sh", requested_by="test")  # its run succeeding means the loop is running
    wait_for(lambda: query(database_url, "SELECT status FROM run WHERE status = 'success'"))

    assert _python_workers(daemon.pid) == set()
