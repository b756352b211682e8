"""A real daemon's batch window: jobs of one claim that end close together have their outcomes
written in one transaction; one that runs on never holds its neighbours' outcomes back for
longer than the window."""

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler_daemon.domain.task import TaskSpec
from tests.support import query, wait_for

pytestmark = pytest.mark.slow


def _released_pair(
    client: Any, spawn: Any, url: str, job_dir: Path, *, late: int, window: str
) -> Any:
    """Two python jobs claimed together by one daemon (--concurrency 2), each waiting for the
    test's `go` file: `early-0` ends as soon as it is released, `late-N` N ms after it. The
    interleaving is forced: both are running before either may end."""
    for name in ("early-0", f"late-{late}"):
        client.add_task(
            TaskSpec(
                name=name,
                executor="python",
                target="tests.jobs:after_go",
                every=timedelta(hours=1),
                overlap="allow",
            )
        )
        client.trigger(name, requested_by="test")
    daemon = spawn(
        url, "w", "--concurrency", "2", "--batch-window", window,
        env={"TEST_JOB_DIR": str(job_dir)},
    )  # fmt: skip
    wait_for(
        lambda: len(list(job_dir.glob("started-*"))) == 2,
        message="both jobs to run",
    )
    (job_dir / "go").touch()
    return daemon


def _runs(url: str) -> dict[str, dict[str, Any]]:
    rows = query(
        url,
        "SELECT t.name, r.status, r.xmin::text AS written_by FROM run r "
        "JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id",
    )
    return {row["name"].split("-")[0]: row for row in rows}


@pytest.mark.parametrize("case", [("100ms", 1), ("0", 2)], ids=["window", "no-window"])
def test_jobs_that_end_within_the_window_are_written_in_one_transaction(
    client, spawn, database_url, tmp_path, case
) -> None:
    """The late job ends 40 ms after the early one. With a 100 ms window the loop waits for it
    and one completion transaction writes both runs (the same xmin); with the window off, the
    early one's outcome is written at once and the late one's in a second transaction. (Without
    the window both cases write two: the first case fails against that version.)"""
    window, transactions = case
    daemon = _released_pair(client, spawn, database_url, tmp_path, late=40, window=window)
    runs = wait_for(
        lambda: (
            (r := _runs(database_url))
            and all(run["status"] == "success" for run in r.values())
            and r
        ),
        message="both runs to succeed",
    )
    assert len({run["written_by"] for run in runs.values()}) == transactions, daemon.log()


def test_a_job_that_runs_on_holds_its_neighbours_outcome_back_by_the_window_only(
    client, spawn, database_url, tmp_path
) -> None:
    """The late job runs 5 s after its neighbour ended. An unbounded wait for it (the window
    without its bound) would keep the early job's outcome unwritten for those 5 s: it must be
    written while the late job still runs."""
    daemon = _released_pair(client, spawn, database_url, tmp_path, late=5000, window="100ms")
    runs = wait_for(
        lambda: (r := _runs(database_url)) and r["early"]["status"] == "success" and r,
        timeout=4,
        message="the early job's outcome",
    )
    assert runs["late"]["status"] == "running", daemon.log()
