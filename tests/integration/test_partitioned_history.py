"""The hot set and history partitioned by the time a row ended (issue 47): a row ends by a move
out of the default partition, never by an UPDATE of `finished_at`, so a writer that waited on
it is fenced (matches nothing) instead of failing; an ended row lands in the dated partition of
its `finished_at` (or the default when none covers it); guarantee 2 is held by `firing_key`."""

import threading
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from scheduler_daemon.storage import query as named
from tests.support import launched_shell_run, query, shell_task


def _dated_partitions(url: str, days_ahead: int = -1) -> None:
    """A dated partition of each table of three days from `days_ahead` days after today (by
    default the days around now), named as the upkeep names them (occurrence_pYYYYMMDDHH24MI:
    its lower bound, UTC)."""
    (row,) = query(url, "SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AS day")
    low: datetime = row["day"] + timedelta(days=days_ahead)
    high = low + timedelta(days=3)
    with psycopg.connect(url, autocommit=True) as conn:
        for table in ("occurrence", "run"):
            conn.execute(
                f"CREATE TABLE {table}_p{low:%Y%m%d%H%M} PARTITION OF {table} "  # type: ignore[arg-type]
                f"FOR VALUES FROM ('{low:%Y-%m-%d} UTC') TO ('{high:%Y-%m-%d} UTC')"
            )


def _where(url: str, table: str, row_id: int) -> str:
    (row,) = query(
        url, f"SELECT tableoid::regclass::text AS part FROM {table} WHERE id = %s", (row_id,)
    )
    return str(row["part"])


LEASE = "SELECT id, occurrence_id, owner, lease_token FROM run WHERE status = 'running'"
# Each ending statement with its parameters, and the same end written as the UPDATE it replaced.
FINISH = {
    "occurrence": (
        "occurrence_finish",
        lambda lease: {
            "id": lease["occurrence_id"],
            "token": lease["lease_token"],
            "status": "failed",
            "error": "late",
            "reason": None,
        },
        "UPDATE occurrence SET status = 'success', finished_at = clock_timestamp() "
        "WHERE id = %(occurrence_id)s AND status = 'running' AND lease_token = %(lease_token)s",
    ),
    "run": (
        "run_finish",
        lambda lease: {
            "id": lease["id"],
            "owner": lease["owner"],
            "token": lease["lease_token"],
            "status": "failed",
            "exit_code": 1,
            "http_status": None,
            "output_tail": None,
            "error": "late",
        },
        "UPDATE run SET status = 'success', finished_at = clock_timestamp() "
        "WHERE id = %(id)s AND owner = %(owner)s AND lease_token = %(lease_token)s "
        "AND status = 'running'",
    ),
}


def _race(url: str, first: Any, second: Any) -> Any:
    """Runs `first` in a transaction that holds its row, starts `second` in another session
    (which waits on that row), commits the first, and returns what the second did: its row
    count, or the error it raised."""
    outcome: dict[str, Any] = {}
    with psycopg.connect(url) as holder, psycopg.connect(url, autocommit=True) as waiter:
        assert first(holder) == 1  # the row is ended and held, uncommitted
        (pid,) = holder.execute("SELECT pg_backend_pid()").fetchone() or (0,)

        def wait() -> None:
            try:
                outcome["rows"] = second(waiter)
            except psycopg.Error as error:
                outcome["error"] = error

        thread = threading.Thread(target=wait)
        thread.start()
        # The race window: the second session is blocked on the row the first one holds.
        with psycopg.connect(url, autocommit=True) as watch:
            for _ in range(500):
                blocked = watch.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                    (pid,),
                ).fetchone()
                if blocked and blocked[0]:
                    break
                threading.Event().wait(0.01)
            else:
                pytest.fail("the second session never waited on the held row")
        holder.commit()
        thread.join(30)
    return outcome


@pytest.mark.parametrize("table", ["occurrence", "run"])
def test_a_writer_that_waited_on_a_row_ending_meanwhile_is_fenced_not_an_error(
    client, pool, executors, database_url, table
) -> None:
    # With a dated partition covering now, the end moves the row out of the default partition.
    # The end as a cross-partition UPDATE (`SET finished_at = ...`) made the waiting writer fail
    # with SQLSTATE 40001 ("tuple to be locked was already moved to another partition"): the
    # second case below shows it. As a move (DELETE from the default, INSERT through the parent)
    # the waiter sees the row deleted and matches nothing: "fenced", as before partitioning.
    _dated_partitions(database_url)
    launched_shell_run(client, pool, executors, database_url, command="true")
    (lease,) = query(database_url, LEASE)
    name, params, _ = FINISH[table]

    def end(conn: Any) -> Any:
        return named.run(conn, name, params(lease))

    outcome = _race(database_url, end, end)
    assert outcome == {"rows": 0}  # fenced, not an error
    row_id = lease["occurrence_id"] if table == "occurrence" else lease["id"]
    assert _where(database_url, table, row_id).startswith(f"{table}_p")  # moved to history
    (row,) = query(database_url, f"SELECT status, error FROM {table} WHERE id = %s", (row_id,))
    assert row == {"status": "failed", "error": "late"}  # the first end, written once


@pytest.mark.parametrize("table", ["occurrence", "run"])
def test_the_end_as_a_cross_partition_update_makes_the_waiting_writer_fail(
    client, pool, executors, database_url, table
) -> None:
    # Why the ends are moves: the UPDATE they replaced, in the same race, raises 40001 in the
    # writer that waited, where a fenced write must return "fenced".
    _dated_partitions(database_url)
    launched_shell_run(client, pool, executors, database_url, command="true")
    (lease,) = query(database_url, LEASE)
    _, _, update = FINISH[table]

    def end(conn: Any) -> Any:
        return conn.execute(update, lease).rowcount

    outcome = _race(database_url, end, end)
    assert isinstance(outcome.get("error"), psycopg.errors.SerializationFailure), outcome


def test_an_ended_row_no_dated_partition_covers_stays_in_the_default(
    client, pool, executors, database_url
) -> None:
    # The fallback (upkeep behind, or no partitions at all): the default keeps the ended row and
    # nothing stops. A dated partition of a later range can still be made beside it (one whose
    # range holds a row of the default cannot: the upkeep moves such rows out first).
    first = launched_shell_run(client, pool, executors, database_url, command="exit 0")
    (run,) = first.replica.finished()
    assert first.replica.completer.complete(run) == "recorded"
    assert _where(database_url, "occurrence", run.occurrence_id) == "occurrence_active"
    assert _where(database_url, "run", run.run_id) == "run_active"
    _dated_partitions(database_url, days_ahead=2)
    second = launched_shell_run(
        client, pool, executors, database_url, name="second", command="exit 0", instance="b"
    )
    (run,) = second.replica.finished()
    assert second.replica.completer.complete(run) == "recorded"
    assert _where(database_url, "occurrence", run.occurrence_id) == "occurrence_active"
    rows = query(database_url, "SELECT status FROM occurrence ORDER BY id")
    assert [r["status"] for r in rows] == ["success", "success"]


def test_a_second_dispatch_of_one_instant_is_kept_out_by_its_firing_key(client, db) -> None:
    # Guarantee 2 on a table partitioned by finished_at lives in firing_key: fails if the
    # dispatch's key insert is removed (the occurrence would go in a second time).
    task = shell_task(client)
    instant = datetime.now().astimezone() - timedelta(minutes=5)
    params = {
        "task_id": task.id,
        "occurrence_seq": 1,
        "scheduled_for": instant,
        "last_scheduled_for": None,
        "firing_count": 1,
        "trigger": "schedule",
        "overlap": "allow",
        "concurrency_key": None,
        "status": "skipped",
        "reason": "missed",
        "requested_by": None,
        "now": instant,
        "finished": ["skipped"],
    }
    assert named.run(db, "occurrence_insert", params) is not None
    assert named.run(db, "occurrence_insert", {**params, "occurrence_seq": 2}) is None
    keys = db.execute(
        "SELECT count(*) AS n FROM firing_key WHERE task_id = %s AND trigger = 'schedule'",
        (task.id,),
    ).fetchone()
    rows = db.execute(
        "SELECT count(*) AS n FROM occurrence WHERE task_id = %s", (task.id,)
    ).fetchone()
    assert (keys, rows) == ({"n": 1}, {"n": 1})
