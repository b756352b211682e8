"""The generic older-build mechanism (ADR 0029) on its SQL paths: a task or occurrence marked
`needs_build` with a revision absent from a build's chain (`known`) is passed over by that
build's dispatch, claim and reconciler, and run by a build that knows the revision; every way an
occurrence is made copies its task's mark; the Client marks a write that needs a newer build
only while an instance of an older one is registered, and refuses such a fleet setting.

The marked revision is the synthetic expand step's, 9001 (tests/builds.py): OLD is the chain of
this build, which lacks it; NEW is the chain of a build that has it."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler_daemon.client.base import mark_if_older
from scheduler_daemon.domain import control
from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.services.dispatcher import Dispatcher
from scheduler_daemon.services.reconciler import Reconciler
from scheduler_daemon.storage import migration, occurrence_store
from scheduler_daemon.storage.database import one_trip
from scheduler_daemon.storage.error import Conflict
from tests.support import SETTINGS, launched_shell_run, query, shell_task

MARK = "9001"
OLD = migration.known_revisions()
NEW = [*OLD, MARK]
HOUR = timedelta(hours=1)


def _mark(url: str, table: str, row_id: int) -> None:
    query(url, f"UPDATE {table} SET needs_build = %s WHERE id = %s RETURNING id", (MARK, row_id))


def _marks(url: str, task_id: int) -> list[tuple[str, str | None]]:
    rows = query(
        url,
        "SELECT trigger, needs_build FROM occurrence WHERE task_id = %s ORDER BY id",
        (task_id,),
    )
    return [(r["trigger"], r["needs_build"]) for r in rows]


def _claim(pool: Any, known: list[str]) -> list[int]:
    """The launcher's claim as a build with chain `known` sends it, without starting jobs."""
    statement = occurrence_store.claim_launch_statement(
        owner="t", slots=10, ttl=HOUR, grace=HOUR, known=known
    )
    _, launched = occurrence_store.launched(one_trip(pool, statement)[0])
    return [claim.id for claim, _ in launched]


def _register(url: str, schema_revision: str) -> None:
    query(
        url,
        "INSERT INTO instance (id, hostname, pid, version, schema_revision, concurrency, "
        "lease_ttl, lease_grace, reconcile_interval) "
        "VALUES ('older', 'h', 1, 'v', %s, 4, '3 s', '1 s', '1 s') RETURNING id",
        (schema_revision,),
    )


def test_the_dispatch_passes_over_a_task_marked_with_a_revision_its_build_lacks(
    client, pool, database_url
) -> None:
    """Fails without the mechanism: the due scan of a build without 9001 would dispatch it."""
    task = shell_task(client, "marked")
    plain = shell_task(client, "plain")
    _mark(database_url, "task", task.id)
    later = datetime.now(UTC) + 2 * HOUR
    old = Dispatcher(pool, instance_id="old", batch=10, known=OLD).run_once(now=later)
    assert old.tasks == 1
    assert _marks(database_url, task.id) == []
    assert {mark for _, mark in _marks(database_url, plain.id)} == {None}
    assert old.next_due is not None
    assert old.next_due > later  # the marked task is not counted as due
    new = Dispatcher(pool, instance_id="new", batch=10, known=NEW).run_once(now=later)
    assert new.tasks == 1
    assert {mark for _, mark in _marks(database_url, task.id)} == {MARK}  # firings copy it


def test_the_claim_passes_over_a_marked_occurrence_and_a_build_that_knows_it_claims_it(
    client, pool, database_url
) -> None:
    """Fails without the mechanism: the claim of a build without 9001 would take the marked
    occurrence (it is the oldest queued)."""
    task = shell_task(client, "marked", overlap="allow")
    plain = shell_task(client, "plain", overlap="allow")
    _mark(database_url, "task", task.id)
    marked = client.trigger(task.id, requested_by="test")
    unmarked = client.trigger(plain.id, requested_by="test")
    assert _marks(database_url, task.id) == [("manual", MARK)]
    assert _claim(pool, OLD) == [unmarked.id]
    assert _claim(pool, OLD) == []
    assert _claim(pool, NEW) == [marked.id]


def test_every_occurrence_a_marked_task_gets_carries_its_mark(client, database_url) -> None:
    """Fails without the mechanism: a manual trigger, a batch of them and a backfill would make
    unmarked occurrences, which every build claims."""
    hourly = TaskSpec("marked", "shell", "true", cron="0 * * * *", overlap="allow")
    task = client.add_task(hourly)
    _mark(database_url, "task", task.id)
    client.trigger(task.id, requested_by="test")
    client.trigger(task.id, requested_by="test", count=2)
    start = datetime.now(UTC) - 3 * HOUR
    client.backfill(task.id, start=start, end=start + 2 * HOUR, requested_by="test")
    made = _marks(database_url, task.id)
    assert {trigger for trigger, _ in made} == {"manual", "backfill"}
    assert len(made) >= 4
    assert {mark for _, mark in made} == {MARK}


def _reconciler(pool: Any, known: list[str]) -> Reconciler:
    """A daemon's reconciler (tests.support.SETTINGS) of a build whose chain is `known`."""
    found = Reconciler.from_settings(pool, "rec", SETTINGS)
    found.known = known
    return found


def test_the_reconciler_leaves_a_marked_run_to_a_build_that_knows_its_revision(
    client, pool, executors, database_url
) -> None:
    """Fails without the mechanism: the reconciler of a build without 9001 would take the
    expired run over and requeue its occurrence for its own claim."""
    _, occurrence, _, run = launched_shell_run(client, pool, executors, database_url)
    _mark(database_url, "occurrence", occurrence.id)
    query(
        database_url,
        "UPDATE run SET lease_expires_at = now() - interval '10 s', "
        "takeover_at = now() - interval '5 s' WHERE status = 'running' RETURNING id",
    )
    assert _reconciler(pool, OLD).run_once().ids["taken_over"] == []
    assert query(database_url, "SELECT status FROM run") == [{"status": "running"}]
    assert _reconciler(pool, NEW).run_once().ids["taken_over"] == [run.run_id]


def test_the_reconciler_leaves_a_marked_tasks_pause_to_a_build_that_knows_it(
    client, pool, database_url
) -> None:
    """Fails without the mechanism: the reconciler of a build without 9001 would resume it."""
    task = shell_task(client, "marked")
    client.pause(task.id, until=timedelta(seconds=30))
    _mark(database_url, "task", task.id)
    query(database_url, "UPDATE task SET paused_until = now() - interval '1 s' RETURNING id")
    assert _reconciler(pool, OLD).run_once().ids["resumed_tasks"] == []
    assert _reconciler(pool, NEW).run_once().ids["resumed_tasks"] == [task.id]


def test_a_write_that_needs_a_newer_build_is_marked_only_while_an_older_one_is_registered(
    client, database_url, monkeypatch
) -> None:
    """Fails without the mechanism: the task would be written unmarked beside the older build,
    which would then run it without the feature."""
    monkeypatch.setitem(control.NEEDS, "spread", MARK)  # as if 9001 brought `--spread`
    spread = {"spread": timedelta(minutes=5)}
    _register(database_url, OLD[-1])
    with client._tx() as conn:
        assert mark_if_older(conn, MARK) == MARK
        assert mark_if_older(conn, None) is None
    marked = shell_task(client, "marked", **spread)
    assert marked.needs_build == MARK
    assert shell_task(client, "plain").needs_build is None  # it uses no registered feature
    assert client.add_tasks([TaskSpec("batch", "shell", "true", every=HOUR, **spread)])[
        0
    ].needs_build == (MARK)
    query(database_url, "DELETE FROM instance RETURNING id")  # the older build rolled
    with client._tx() as conn:
        assert mark_if_older(conn, MARK) is None
    assert client.update_task(marked.id, spread=timedelta(minutes=6)).needs_build is None
    assert shell_task(client, "after", **spread).needs_build is None


def test_a_fleet_setting_that_needs_a_newer_build_is_refused_while_an_older_one_runs(
    client, cli, database_url, monkeypatch
) -> None:
    """Fails without the mechanism: the setting would be written, and the older build would
    read it without knowing what it means. A fleet setting cannot be marked: one line, exit 2."""
    monkeypatch.setitem(control.NEEDS, "max_concurrent_runs", MARK)
    _register(database_url, OLD[-1])
    with pytest.raises(Conflict, match="instance\\(s\\) older of an older build"):
        client.set_fleet_setting("max-concurrent-runs", "5", updated_by="test")
    said = cli("config", "set", "max-concurrent-runs", "5")
    assert said.code == 2, said.err
    assert said.err.count("\n") == 1
    assert "needs builds from schema 9001 on" in said.err
    assert client.fleet_settings()["max_concurrent_runs"] != 5
    query(database_url, "DELETE FROM instance RETURNING id")
    client.set_fleet_setting("max-concurrent-runs", "5", updated_by="test")
    assert client.fleet_settings()["max_concurrent_runs"] == 5
