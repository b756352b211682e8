"""A poison row is a row, not an outage (issue 28, the daemon's read side): a value an older build
or an operator wrote by hand with SQL, past anything the daemon can compute with, fails no pass.
The budget is read as a bigint capped to 100,000 (a value that is not a number: 0), and every
interval the daemon reads from a task row, or adds to or subtracts from now(), is capped at 100
years, so the claim, `status`, the dispatch, the prune, the retry and the start-deadline pass
still work; a prune batch that still fails on one task's rows is done again a task at a time.
Each test that writes a bad value fails on the build before revision 0015; the others guard what
the clamps must leave alone (no timeout stays none, every task column is still read). A
concurrency key no btree can hold is the dispatcher's (test_poison_outcomes.py)."""

from datetime import timedelta

import psycopg
import pytest
from structlog.testing import capture_logs

from scheduler_daemon.domain import limit
from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.services.pruner import Pruner
from scheduler_daemon.storage import fleet_store
from scheduler_daemon.storage import query as queries
from scheduler_daemon.storage.database import transaction
from tests.support import Replica, launched_shell_run, make_reconciler, query, shell_task

DAY = timedelta(days=1)
CENTURY = limit.MAX_DURATION  # the cap: 36,525 days, the longest duration any input takes


def _set(url: str, key: str, value: str) -> None:
    """Writes a fleet setting by hand, as an old build or an operator with psql could."""
    query(
        url,
        "INSERT INTO fleet_setting (key, value) VALUES (%s, %s::jsonb) "
        "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        (key, value),
    )


@pytest.mark.parametrize(
    ("stored", "read"),
    [
        ("2147483648", 100_000),  # past int: `(value::text)::int` failed every claim
        ("1e30", 100_000),
        ("9223372036854775808", 100_000),  # past bigint too
        ("12.7", 12),
        ("-3", 0),
        ('"sixteen"', 0),  # not a number: no budget, as without the row
        ('"16"', 0),
        ("null", 0),
        ("[16]", 0),
    ],
)
def test_a_budget_written_by_hand_fails_neither_the_claim_nor_status(
    client, pool, executors, database_url, *, stored: str, read: int
) -> None:
    _set(database_url, "max_concurrent_runs", stored)
    task = shell_task(client, overlap="allow")
    client.trigger(task.id, requested_by="test")
    with transaction(pool) as tx:
        assert fleet_store.budget(tx.conn) == read
    assert client.status()["max_concurrent_runs"] == read
    replica = Replica(database_url, pool, executors, "a")
    launched = replica.launcher.run_once()
    assert launched.launched == min(read, 1)
    replica.finished()


def _finished(url: str, task_id: int, ages: list[timedelta]) -> list[int]:
    """Finished occurrences of a task, `age` ago, each with a run; the newest one shown as the
    task's latest outcome."""
    (now,) = query(url, "SELECT now() AS t")
    ids = []
    for seq, age in enumerate(ages, start=1):
        at = now["t"] - age
        (row,) = query(
            url,
            "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, "
            "status, not_before, created_at, finished_at, attempts, lease_token) "
            "VALUES (%s, %s, %s, 'schedule', 'allow', 'success', %s, %s, %s, 1, 1) RETURNING id",
            (task_id, seq, at, at, at, at),
        )
        query(
            url,
            "INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at, "
            "takeover_at, status, started_at, finished_at, build_revision) "
            "VALUES (%s, 1, 'x', 1, %s, %s, 'success', %s, %s, 'b')",
            (row["id"], at, at, at, at),
        )
        ids.append(row["id"])
    query(
        url,
        "UPDATE task SET occurrence_seq = %s, last_outcome_seq = %s, last_occurrence_id = %s, "
        "last_status = 'success' WHERE id = %s",
        (len(ages), len(ages), ids[-1], task_id),
    )
    return ids


def _ids(url: str, task_id: int) -> list[int]:
    rows = query(url, "SELECT id FROM occurrence WHERE task_id = %s ORDER BY id", (task_id,))
    return [r["id"] for r in rows]


@pytest.mark.parametrize("fleet", ['"999999999d"', '"30d"'])
@pytest.mark.parametrize("own", ["2500000 days", "100000000 years"])
def test_a_retention_past_the_calendar_prunes_the_other_tasks(
    client, pool, database_url, fleet: str, own: str
) -> None:
    _set(database_url, "history_retention", fleet)
    short = shell_task(client, name="short", history_retention=2 * DAY)
    short_ids = _finished(database_url, short.id, [50 * DAY, 40 * DAY, DAY])
    huge = shell_task(client, name="huge")
    huge_ids = _finished(database_url, huge.id, [50 * DAY, 40 * DAY])
    client.delete(huge.id, requested_by="test")  # a deleted task keeps its own retention
    query(
        database_url,
        "UPDATE task SET history_retention = %s::interval WHERE id = %s",
        (own, huge.id),
    )
    plain = shell_task(client, name="plain")
    plain_ids = _finished(database_url, plain.id, [50 * DAY, 40 * DAY])

    report = Pruner(pool, instance_id="t").run_once()

    assert _ids(database_url, short.id) == short_ids[2:]  # its own 2 days
    assert _ids(database_url, huge.id) == huge_ids  # kept: its retention has not passed
    kept_by_fleet = fleet == '"999999999d"'
    assert _ids(database_url, plain.id) == (plain_ids if kept_by_fleet else plain_ids[1:])
    assert report.occurrences == (2 if kept_by_fleet else 3)


def test_a_prune_batch_one_task_cannot_delete_still_prunes_the_others(
    client, pool, database_url
) -> None:
    _set(database_url, "history_retention", '"30d"')
    tasks = [shell_task(client, name=name) for name in ("a", "poisoned", "c")]
    ids = {t.name: _finished(database_url, t.id, [50 * DAY, 45 * DAY, 40 * DAY]) for t in tasks}
    # A data error on one task's rows only, raised by the server as the batch deletes them.
    query(
        database_url,
        """
        CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF EXISTS (SELECT 1 FROM task WHERE id = OLD.task_id AND name = 'poisoned') THEN
                RAISE EXCEPTION 'timestamp out of range' USING ERRCODE = '22008';
            END IF;
            RETURN OLD;
        END $$;
        CREATE TRIGGER refuse_delete BEFORE DELETE ON occurrence
            FOR EACH ROW EXECUTE FUNCTION refuse_delete();
        """,
    )

    with capture_logs() as logs:
        report = Pruner(pool, instance_id="t").run_once()

    assert _ids(database_url, tasks[0].id) == ids["a"][2:]
    assert _ids(database_url, tasks[1].id) == ids["poisoned"]
    assert _ids(database_url, tasks[2].id) == ids["c"][2:]
    assert report.occurrences == 4
    failed = [e for e in logs if e["event"] == "prune_task_failed"]
    assert [e["task_id"] for e in failed] == [tasks[1].id]
    assert failed[0]["sqlstate"] == "22008"


def test_a_start_deadline_past_the_calendar_fails_no_reconcile_pass(
    client, pool, database_url
) -> None:
    endless = shell_task(client, name="endless", overlap="allow")
    due = shell_task(client, name="due", overlap="allow", start_deadline=timedelta(seconds=1))
    query(
        database_url,
        "UPDATE task SET start_deadline = interval '1000000 years' WHERE id = %s",
        (endless.id,),
    )
    client.trigger(endless.id, requested_by="test")
    late = client.trigger(due.id, requested_by="test")
    query(database_url, "UPDATE occurrence SET scheduled_for = scheduled_for - interval '1 hour'")
    reconciler = make_reconciler(pool, "r")
    report = reconciler.run_once()
    assert report.ids["expired"] == [late.id]


def test_a_backoff_past_the_calendar_retries_within_a_century(
    client, pool, executors, database_url
) -> None:
    replica = launched_shell_run(
        client, pool, executors, database_url, command="exit 3", max_attempts=2
    ).replica
    query(database_url, "UPDATE task SET backoff = interval '1000000 years'")
    (run,) = replica.finished()
    assert replica.completer.complete(run) == "retry"
    (occ,) = query(database_url, "SELECT status, not_before - updated_at AS wait FROM occurrence")
    assert occ["status"] == "queued"
    assert CENTURY - timedelta(seconds=5) <= occ["wait"] <= CENTURY


def test_a_run_timeout_past_the_calendar_is_claimed_as_a_century(
    client, pool, executors, database_url
) -> None:
    task = shell_task(client, overlap="allow")
    client.trigger(task.id, requested_by="test")
    query(database_url, "UPDATE task SET run_timeout = interval '100000000 years'")
    replica = Replica(database_url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 1
    (run,) = replica.finished()
    assert run.outcome is not None


@pytest.mark.parametrize(
    ("stored", "claimed"),
    [
        (None, None),
        ("1 hour", timedelta(hours=1)),
        ("36400 days", timedelta(days=36400)),  # inside the input bound: read unchanged
        ("100000000 years", CENTURY),
    ],
)
def test_the_claim_returns_a_run_timeout_capped_and_no_timeout_as_none(
    client, database_url, stored: str | None, claimed: timedelta | None
) -> None:
    task = shell_task(client, overlap="allow")
    client.trigger(task.id, requested_by="test")
    query(database_url, "UPDATE task SET run_timeout = %s::interval", (stored,))
    (row,) = query(
        database_url,
        "SELECT run_timeout FROM sd_claim_launch_v6(1, 1, 'o', '5s', '1s', 'x', '{}', NULL)",
    )
    assert row["run_timeout"] == claimed


@pytest.mark.parametrize("column", ["misfire_grace", "catchup_window", "backoff", "run_timeout"])
def test_an_interval_past_what_python_holds_fails_no_dispatch_pass(
    client, pool, executors, database_url, column: str
) -> None:
    (db_now,) = query(database_url, "SELECT now() AS t")
    created = db_now["t"] - timedelta(hours=2)
    for name in ("huge", "other"):
        client.add_task(
            TaskSpec(name=name, executor="shell", target="true", every=timedelta(hours=1)),
            now=created,
        )
    query(
        database_url,
        f"UPDATE task SET {column} = interval '100000000 years' WHERE name = 'huge'",
    )
    replica = Replica(database_url, pool, executors, "a")
    result = replica.dispatcher.run_once(now=created + timedelta(hours=1, seconds=1))
    assert (result.tasks, result.queued) == (2, 2)


@pytest.mark.parametrize("name", ["task_claim_due", "task_lock", "task_lock_many"])
def test_the_daemons_task_reads_select_every_column_of_task(database_url, name: str) -> None:
    # A column added to task and left out of the `task_read` fragment would be missing from the
    # rows the dispatcher, the completer and the reconciler read.
    columns = query(
        database_url,
        "SELECT column_name AS c FROM information_schema.columns "
        "WHERE table_schema = 'public' AND table_name = 'task'",
    )
    with psycopg.connect(database_url) as conn:
        cursor = conn.execute(
            queries.QUERIES[name].sql,
            {"id": 0, "ids": [0], "limit": 1, "now": None, "known": ["0038"]},
        )
        names = [d.name for d in cursor.description or []]
    # The due scan adds each task's calendar ids (revision 0036), read beside the row.
    extra = ["calendar_ids"] if name == "task_claim_due" else []
    assert sorted(names) == sorted([r["c"] for r in columns] + extra)
