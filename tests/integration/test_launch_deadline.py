"""No job starts past its trust deadline (issue 31 item 2, guarantee 5): a launcher that froze
between sending its claim and starting the jobs refuses them before calling the executor; the
refused run ends `interrupted` (`not started: trust deadline passed`), its occurrence queued
again without using an attempt, and the write is fenced on owner and token like any other.

The freeze is forced deterministically: the claim is sent as the launcher sends it, and its
rows are launched with the claim's send time moved back by more than the trust window (what a
SIGSTOP between the two does to the monotonic clock). tests/chaos/test_frozen_launch.py forces
the same window with real processes. On 518d2f3 the launcher starts the job whatever the
deadline: the executor is called, and these tests fail."""

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scheduler_daemon.executors.base import Job, JobContext
from scheduler_daemon.runtime.metrics import Metrics
from scheduler_daemon.storage.database import one_trip
from tests.support import SETTINGS, Replica, query, shell_task, snapshot

NOT_STARTED = "not started: trust deadline passed"
TRUST_WINDOW = SETTINGS.lease_ttl.total_seconds()  # longer than TTL - TTL/5


class Recording:
    """The real shell executor, recording each start it is asked for."""

    kind = "shell"

    def __init__(self, real: Any) -> None:
        self.real = real
        self.started: list[int] = []

    def start(self, ctx: JobContext, payload: Mapping[str, Any]) -> Job:
        self.started.append(ctx.run_id)
        return self.real.start(ctx, payload)

    def close(self) -> None:
        """The fixture closes the real one."""


def launch(replica: Replica, pool: Any, *, frozen_for: float) -> Any:
    """Claims as the launcher does, then launches what was claimed as if this process had been
    frozen `frozen_for` seconds between sending the claim and starting the jobs."""
    request = replica.launcher.request()
    assert request is not None
    (rows,) = one_trip(pool, request.statement)
    stale = dataclasses.replace(request, made_at=request.made_at - frozen_for)
    return replica.launcher.launch(stale, rows)


def arrange(client, pool, executors, url, tmp_path: Path) -> tuple[Replica, Recording, Path]:
    marker = tmp_path / "ran"
    task = shell_task(client, command=f"touch {marker}")
    client.trigger(task.id, requested_by="test")
    shell = Recording(executors["shell"])
    replica = Replica(url, pool, {**executors, "shell": shell}, "a")
    return replica, shell, marker


def test_a_run_past_its_trust_deadline_is_refused_before_the_executor_and_requeued(
    client, pool, executors, database_url, tmp_path
) -> None:
    replica, shell, marker = arrange(client, pool, executors, database_url, tmp_path)
    (before,) = query(database_url, "SELECT attempts, interruptions FROM occurrence")

    result = launch(replica, pool, frozen_for=TRUST_WINDOW)

    assert shell.started == []  # the executor was never asked
    assert (result.launched, result.not_started, result.started) == (1, 1, [])
    (run,) = replica.finished()
    assert (run.outcome.status, run.outcome.error) == ("stopped", NOT_STARTED)
    assert replica.completer.run_once().done == 1
    (row,) = query(database_url, "SELECT status, error FROM run")
    assert row == {"status": "interrupted", "error": NOT_STARTED}
    (occ,) = query(
        database_url, "SELECT status, attempts, interruptions, lease_token FROM occurrence"
    )
    assert (occ["status"], occ["attempts"]) == ("queued", before["attempts"])
    assert occ["interruptions"] == before["interruptions"] + 1
    assert not marker.exists()
    metrics = Metrics("a", "test", 1)
    metrics.record_launch(result)
    assert metrics.registry.get_sample_value("scheduler_daemon_runs_not_started_total") == 1


def test_a_run_within_its_trust_deadline_starts(
    client, pool, executors, database_url, tmp_path
) -> None:
    replica, shell, marker = arrange(client, pool, executors, database_url, tmp_path)

    result = launch(replica, pool, frozen_for=0.5 * TRUST_WINDOW)  # under TTL - TTL/5

    (run,) = replica.finished()
    assert shell.started == [run.run_id]
    assert run.outcome.status == "success"
    assert marker.exists()
    assert (result.launched, len(result.started)) == (1, 1)


def test_a_refusal_written_after_the_token_moved_on_changes_nothing(
    client, pool, executors, database_url, tmp_path
) -> None:
    # The frozen daemon's run was taken over meanwhile: its refusal must not touch the rows.
    replica, shell, _ = arrange(client, pool, executors, database_url, tmp_path)
    launch(replica, pool, frozen_for=TRUST_WINDOW)
    query(database_url, "UPDATE occurrence SET lease_token = lease_token + 1 RETURNING id")
    (run,) = replica.finished()
    before = snapshot(database_url)

    assert replica.completer.complete(run) == "fenced"
    assert snapshot(database_url) == before
    assert shell.started == []
