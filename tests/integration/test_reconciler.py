"""Reconciliation against a real database: every non-terminal state planted and repaired, and
every race forced into its window (a held row lock orders the contenders)."""

import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.services import reconciler as reconciler_module
from scheduler_daemon.services.reconciler import Reconciler
from scheduler_daemon.settings import DaemonSettings
from scheduler_daemon.storage.database import Limits, make_pool
from tests.support import (
    launched_shell_run,
    query,
    shell_task,
    snapshot,
    wait_for,
    wait_past_restart_quiet,
)


def reconciler(
    pool: Any, name: str = "rec", *, quiet: timedelta = timedelta(0), page: int = 100
) -> Reconciler:
    return Reconciler(
        pool,
        instance_id=name,
        restart_quiet=quiet,
        max_interruptions=3,
        dead_after=timedelta(minutes=10),
        page=page,
    )


def _expire_leases(url: str) -> None:
    """What a dead owner leaves behind: leases whose takeover point has passed."""
    query(
        url,
        "UPDATE run SET lease_expires_at = now() - interval '10 seconds', "
        "takeover_at = now() - interval '5 seconds' WHERE status = 'running' RETURNING id",
    )


def _waiting_for_lock(url: str, count: int) -> bool:
    rows = query(
        url,
        "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND datname = current_database()",
    )
    return rows[0]["n"] >= count


def test_a_run_past_its_takeover_point_is_taken_over_and_its_occurrence_requeued(
    client, pool, executors, database_url
) -> None:
    _, _, owner, held = launched_shell_run(
        client, pool, executors, database_url, command="sleep 30", instance="owner"
    )
    _expire_leases(database_url)
    report = reconciler(pool).run_once()
    assert report.ids["taken_over"] == [held.run_id]
    (run,) = query(database_url, "SELECT status, finished_by FROM run")
    assert run == {"status": "interrupted", "finished_by": "rec"}
    (occ,) = query(database_url, "SELECT status, attempts, interruptions FROM occurrence")
    assert occ == {"status": "queued", "attempts": 0, "interruptions": 1}
    # The owner learns it lost the run at its next renewal and stops the job.
    assert owner.keeper.run_once() == {held.run_id}
    assert wait_for(held.job.poll, timeout=5).status == "stopped"
    before = snapshot(database_url)
    owner.completer.run_once()
    assert snapshot(database_url) == before


def test_a_run_before_its_takeover_point_is_never_touched_whatever_its_instance_row_says(
    client, pool, executors, database_url
) -> None:
    launched_shell_run(
        client, pool, executors, database_url, command="sleep 30", instance="owner-gone"
    )
    # No instance row at all for the owner, and an ancient one for somebody else.
    query(
        database_url,
        "INSERT INTO instance (id, hostname, pid, version, schema_revision, "
        "concurrency, lease_ttl, lease_grace, reconcile_interval, heartbeat_at) "
        "VALUES ('ghost', 'h', 1, 'v', '0001', 1, '3s', '1s', '1s', "
        "now() - interval '1 day') RETURNING id",
    )
    before = snapshot(database_url)
    report = reconciler(pool).run_once()
    assert report.ids["taken_over"] == []
    assert report.ids["removed_instances"] == ["ghost"]
    assert snapshot(database_url) == before


@pytest.fixture
def patient_reconciler(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reconciler waits for a row lock as long as it is held. Its first try gives up after
    FIRST_TRY_LIMITS (100 ms) and queues again behind whoever queued meanwhile, so a test that
    orders contenders with a held lock would, on a loaded machine, see its forced order flip."""
    patient = Limits(lock_timeout="30s")
    monkeypatch.setattr(reconciler_module, "FIRST_TRY_LIMITS", patient)
    monkeypatch.setattr(reconciler_module, "UNIT_LIMITS", patient)


@pytest.mark.usefixtures("patient_reconciler")
@pytest.mark.parametrize("first", ["completion", "takeover"])
def test_completion_and_takeover_racing_on_one_run_exactly_one_wins(
    client, pool, executors, database_url, first
) -> None:
    # A held task lock makes both contenders queue on it in a forced order; whichever gets it
    # first must win and the other must change nothing. A takeover by run id alone (river#1302)
    # would overwrite the completed run in the "completion first" order.
    task, _, owner, _ = launched_shell_run(
        client, pool, executors, database_url, command="exit 0", instance="owner"
    )
    (held,) = owner.finished()
    _expire_leases(database_url)
    results: dict[str, Any] = {}
    contenders = {
        "completion": lambda: results.__setitem__("completion", owner.completer.complete(held)),
        "takeover": lambda: results.__setitem__("takeover", reconciler(pool).run_once()),
    }
    order = [first, "takeover" if first == "completion" else "completion"]
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT id FROM task WHERE id = %s FOR UPDATE", (task.id,))
        threads = []
        for n, name in enumerate(order, start=1):
            threads.append(threading.Thread(target=contenders[name]))
            threads[-1].start()
            wait_for(lambda n=n: _waiting_for_lock(database_url, n), message=f"{name} to queue")
        holder.commit()
    for t in threads:
        t.join(30)
    (run,) = query(database_url, "SELECT status FROM run")
    (occ,) = query(database_url, "SELECT status, interruptions FROM occurrence")
    if first == "completion":
        assert results["completion"] == "recorded"
        assert results["takeover"].ids["taken_over"] == []
        assert (run["status"], occ["status"]) == ("success", "success")
    else:
        assert results["takeover"].ids["taken_over"] == [held.run_id]
        assert results["completion"] == "fenced"
        assert (run["status"], occ["status"], occ["interruptions"]) == ("interrupted", "queued", 1)


ORPHANS = 150  # more than one page: a rescuer that stops after one page fails (river#1318)


def _plant_orphans(url: str) -> None:
    (task,) = query(
        url,
        "INSERT INTO task (name, schedule_kind, every, anchor_at, executor, "
        "payload, overlap, misfire) VALUES ('many', 'interval', '1 hour', now(), "
        "'shell', '{\"command\": \"true\"}', 'allow', 'run_once') RETURNING id",
    )
    query(
        url,
        """
        WITH occ AS (
            INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap,
                                    status, attempts, lease_token, claim_owner, not_before)
            SELECT %(task)s, g, now() - g * interval '1 second', 'manual', 'allow', 'running',
                   1, 1, 'dead', now()
            FROM generate_series(1, %(n)s) g RETURNING id)
        INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at, takeover_at,
            build_revision)
        SELECT id, 1, 'dead', 1, now() - interval '10 seconds', now() - interval '5 seconds',
            'planted'
        FROM occ RETURNING id""",
        {"task": task["id"], "n": ORPHANS},
    )
    query(url, "UPDATE task SET occurrence_seq = %s RETURNING id", (ORPHANS,))


def test_two_reconcilers_at_once_take_each_orphan_over_exactly_once(database_url) -> None:
    _plant_orphans(database_url)
    pools = [make_pool(database_url, max_size=1, name=f"r{i}") for i in range(2)]
    for p in pools:
        p.open(wait=True)
    reports: list[Any] = []
    try:
        with psycopg.connect(database_url) as holder:
            # Both reconcilers scan the same first page, then queue on the same task lock.
            holder.execute("SELECT id FROM task FOR UPDATE")
            threads = [
                threading.Thread(
                    target=lambda p=p, i=i: reports.append(
                        reconciler(p, f"rec{i}", page=40).run_once()
                    )
                )
                for i, p in enumerate(pools)
            ]
            for t in threads:
                t.start()
            wait_for(lambda: _waiting_for_lock(database_url, 2), message="both to queue")
            holder.commit()
        for t in threads:
            t.join(60)
    finally:
        for p in pools:
            p.close()
    taken = [run_id for r in reports for run_id in r.ids["taken_over"]]
    assert len(taken) == ORPHANS
    assert len(set(taken)) == ORPHANS
    assert len(reports) == 2
    rows = query(
        database_url,
        "SELECT status, interruptions, count(*) AS n FROM occurrence "
        "GROUP BY status, interruptions",
    )
    assert rows == [{"status": "queued", "interruptions": 1, "n": ORPHANS}]


def test_an_expired_claim_goes_back_to_the_queue(client, pool, database_url) -> None:
    # This build never commits a claim `launching` (it claims and launches in one statement),
    # but a crash of an older build, or an operator's hand, can leave one: it must not hold its
    # occurrence and the budget forever.
    task = shell_task(client, command="sleep 30")
    occurrence_id = client.trigger(task.id, requested_by="test").id
    query(
        database_url,
        "UPDATE occurrence SET status = 'launching', claim_owner = 'slow', "
        "lease_token = lease_token + 1, claim_expires_at = now() - interval '1 second' "
        "RETURNING id",
    )
    report = reconciler(pool).run_once()
    assert report.ids["requeued_claims"] == [occurrence_id]
    (occ,) = query(database_url, "SELECT status, claim_owner FROM occurrence")
    assert occ == {"status": "queued", "claim_owner": None}


def test_a_queued_occurrence_past_its_start_deadline_expires_with_its_task_in_one_step(
    client, pool, database_url
) -> None:
    task = shell_task(client, start_deadline=timedelta(minutes=1))
    client.trigger(task.id, requested_by="test")
    client.trigger(
        shell_task(client, "retrying", start_deadline=timedelta(minutes=1)).id, requested_by="test"
    )
    query(
        database_url,
        "UPDATE occurrence SET scheduled_for = now() - interval '2 minutes' RETURNING id",
    )
    # A retry counts from its not-before time, which is recent: it must not expire.
    query(
        database_url,
        "UPDATE occurrence o SET attempts = 1, not_before = now() FROM task t "
        "WHERE t.id = o.task_id AND t.name = 'retrying' RETURNING o.id",
    )
    report = reconciler(pool).run_once()
    (expired,) = query(
        database_url, "SELECT id, status, reason FROM occurrence WHERE status = 'expired'"
    )
    assert report.ids["expired"] == [expired["id"]]
    assert expired["reason"] == "start_deadline"
    shown = client.get_task(task.id)  # a recurring task's outcome, read from its occurrences
    (seq,) = query(
        database_url, "SELECT occurrence_seq FROM occurrence WHERE id = %s", (expired["id"],)
    )
    assert (shown.last_status, shown.last_outcome_seq) == ("expired", seq["occurrence_seq"])


def _one_shot(client: Any, name: str) -> Any:
    with psycopg.connect(client.database_url) as conn:
        (now,) = conn.execute("SELECT now()").fetchone()
    return client.add_task(
        TaskSpec(name=name, executor="shell", target="true", at=now + timedelta(hours=1))
    )


def test_a_one_shot_task_is_finalized_from_its_latest_occurrence_read_after_the_task_lock(
    client, pool, database_url
) -> None:
    # The reconciler's scan sees the task `running` with a cancelled occurrence; while it waits
    # for the task lock a newer occurrence commits a success. Finalizing from the scan's
    # snapshot would say `cancelled`; reading after the lock says `completed`.
    task = _one_shot(client, "once")
    occ = client.trigger(task.id, requested_by="test")
    query(database_url, "UPDATE task SET status = 'running' RETURNING id")
    # A terminal firing the task row never heard of (e.g. written by an older version).
    query(
        database_url,
        "UPDATE occurrence SET trigger = 'schedule', status = 'cancelled', reason = 'planted', "
        "finished_at = now() WHERE id = %s RETURNING id",
        (occ.id,),
    )
    results: list[Any] = []
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT id FROM task WHERE id = %s FOR UPDATE", (task.id,))
        thread = threading.Thread(target=lambda: results.append(reconciler(pool).run_once()))
        thread.start()
        wait_for(lambda: _waiting_for_lock(database_url, 1), message="the reconciler to wait")
        holder.execute(
            """
            INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap,
                                    status, not_before, finished_at)
            VALUES (%s, 2, now(), 'backfill', 'forbid', 'success', now(), now())""",
            (task.id,),
        )
        holder.execute("UPDATE task SET occurrence_seq = 2 WHERE id = %s", (task.id,))
        holder.commit()
    thread.join(30)
    assert results[0].ids["finalized_tasks"] == [task.id]
    (t,) = query(database_url, "SELECT status, last_status, last_outcome_seq FROM task")
    assert t == {"status": "completed", "last_status": "success", "last_outcome_seq": 2}


def test_one_shot_tasks_without_occurrences_are_cancelled_and_active_ones_left_alone(
    client, pool, database_url
) -> None:
    empty = _one_shot(client, "empty")
    busy = _one_shot(client, "busy")
    client.trigger(busy.id, requested_by="test")
    # Its firing is active (a manual trigger would not hold it: issue 31).
    query(database_url, "UPDATE occurrence SET trigger = 'schedule' RETURNING id")
    query(database_url, "UPDATE task SET status = 'running' RETURNING id")
    report = reconciler(pool).run_once()
    assert report.ids["finalized_tasks"] == [empty.id]
    rows = {r["name"]: r for r in query(database_url, "SELECT name, status, last_error FROM task")}
    assert rows["empty"]["status"] == "cancelled"
    assert rows["empty"]["last_error"] == "no occurrence was ever recorded"
    assert rows["busy"]["status"] == "running"


def test_nothing_is_taken_over_during_the_quiet_period_after_a_database_start(
    client, pool, executors, database_url
) -> None:
    launched_shell_run(client, pool, executors, database_url, command="sleep 30", instance="owner")
    _expire_leases(database_url)
    (age,) = query(database_url, "SELECT now() - pg_postmaster_start_time() AS up")
    quiet = age["up"] + timedelta(hours=1)  # as if the server had started moments ago
    assert reconciler(pool, quiet=quiet).run_once().ids["taken_over"] == []
    assert reconciler(pool).run_once().ids["taken_over"] != []


def recover_scenario(cli: Any, client: Any, pool: Any, executors: Any, url: str) -> None:
    """`recover` takes over a dead owner's run once; its dry run changes nothing. It runs with
    the default settings, whose quiet period after the server's start (TTL + grace, 12 s) it
    waits out first: on a server started moments ago it took nothing over."""
    launched_shell_run(client, pool, executors, url, command="sleep 30", instance="owner")
    _expire_leases(url)
    wait_past_restart_quiet(url, DaemonSettings().restart_quiet)
    before = snapshot(url)
    dry = cli("recover", "--dry-run", "--json", url=url)
    assert dry.code == 0, dry.err
    assert dry.json()["counts"]["taken_over"] == 1
    assert snapshot(url) == before
    first = cli("recover", "--json", url=url).json()
    assert first["counts"]["taken_over"] == 1
    assert first["ids"]["taken_over"] == dry.json()["ids"]["taken_over"]
    second = cli("recover", "--json", url=url).json()
    assert sum(second["counts"].values()) == 0


def test_recover_dry_run_changes_nothing_and_a_second_recover_changes_nothing(
    cli, client, pool, executors, database_url
) -> None:
    recover_scenario(cli, client, pool, executors, database_url)
