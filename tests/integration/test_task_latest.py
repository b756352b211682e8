"""`task_latest` (issue 47): each task's newest outcome and newest success by sequence, kept by
the trigger task_latest_record on occurrence, and read by `tasks list/show`, `tasks health` and
the per-task gauges instead of each task's occurrences. A part moves only to a higher sequence
(guarantee 9: a late writer never replaces a newer result, whichever session commits first);
what the readers show equals what the occurrences say; the failures gauge keeps its meaning;
and the trigger works on a table partitioned by `finished_at` (cloned to every partition, present
and future, and fired by an UPDATE that moves a row there), as the history will be."""

import random
import threading
from typing import Any

import psycopg
import pytest

from scheduler_daemon.domain.task_figures import FAILURES_CAP
from scheduler_daemon.storage import task_sample
from tests.support import Replica, query, shell_task, wait_for

ENDED = ("success", "failed", "timeout", "interrupted", "cancelled", "expired", "skipped")
# What the readers read before issue 47, from the occurrences: the reference they must equal.
NEWEST_FROM_OCCURRENCES = """
SELECT t.id AS task_id,
    (SELECT o.occurrence_seq FROM occurrence o
     WHERE o.task_id = t.id AND o.finished_at IS NOT NULL AND o.status <> 'skipped'
     ORDER BY o.occurrence_seq DESC LIMIT 1) AS seq,
    (SELECT o.status FROM occurrence o
     WHERE o.task_id = t.id AND o.finished_at IS NOT NULL AND o.status <> 'skipped'
     ORDER BY o.occurrence_seq DESC LIMIT 1) AS status,
    (SELECT coalesce(o.error, o.reason) FROM occurrence o
     WHERE o.task_id = t.id AND o.finished_at IS NOT NULL AND o.status <> 'skipped'
     ORDER BY o.occurrence_seq DESC LIMIT 1) AS error,
    (SELECT o.occurrence_seq FROM occurrence o WHERE o.task_id = t.id AND o.status = 'success'
     ORDER BY o.occurrence_seq DESC LIMIT 1) AS success_seq,
    (SELECT o.finished_at FROM occurrence o WHERE o.task_id = t.id AND o.status = 'success'
     ORDER BY o.occurrence_seq DESC LIMIT 1) AS success_finished_at
FROM task t ORDER BY t.id
"""
LATEST = """
SELECT task_id, nullif(occurrence_seq, 0) AS seq, status, error,
    nullif(success_seq, 0) AS success_seq, success_finished_at
FROM task_latest ORDER BY task_id
"""
# The gauges' figures before issue 47: the newest success by a backward read of the success
# index, the failures after it by sequence alone (ADR 0026).
GAUGES_FROM_OCCURRENCES = """
SELECT t.name AS task, s.finished_at AS last_success,
    (SELECT count(*) FROM (
        SELECT FROM occurrence o
        WHERE o.task_id = t.id AND o.status IN ('failed', 'timeout', 'interrupted')
          AND o.occurrence_seq > coalesce(s.occurrence_seq, 0)
        LIMIT %(cap)s) c) AS failures
FROM task t
LEFT JOIN LATERAL (
    SELECT o.occurrence_seq, o.finished_at FROM occurrence o
    WHERE o.task_id = t.id AND o.status = 'success' ORDER BY o.occurrence_seq DESC LIMIT 1
) s ON true
WHERE t.deleted_at IS NULL ORDER BY t.name
"""


def _task(db: psycopg.Connection[Any], name: str) -> int:
    row = db.execute(
        """INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload,
                             occurrence_seq)
           VALUES (%s, 'interval', '1 hour', now(), 'shell', '{"command": "true"}', 1000)
           RETURNING id""",
        [name],
    ).fetchone()
    assert row is not None
    return int(row["id"])


def _running(db: psycopg.Connection[Any], task_id: int, seq: int) -> int:
    """A running occurrence of the task at `seq`, ended later by _end."""
    row = db.execute(
        """INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap,
                                  status, not_before, attempts, lease_token)
           VALUES (%s, %s, now() + %s * interval '1 minute', 'schedule', 'allow', 'running',
                   now(), 1, 1) RETURNING id""",
        [task_id, seq, seq],
    ).fetchone()
    assert row is not None
    return int(row["id"])


END = """UPDATE occurrence SET status = %(status)s, finished_at = clock_timestamp(),
             error = %(error)s, reason = %(reason)s
         WHERE id = %(id)s"""


def _end(conn: psycopg.Connection[Any], occurrence_id: int, status: str, error: Any = None) -> None:
    reason = "planted" if status in ("cancelled", "expired", "skipped") else None
    conn.execute(END, {"id": occurrence_id, "status": status, "error": error, "reason": reason})


def _latest(db: psycopg.Connection[Any], task_id: int) -> dict[str, Any]:
    row = db.execute("SELECT * FROM task_latest WHERE task_id = %s", [task_id]).fetchone()
    assert row is not None
    return dict(row)


def _waiting_for_a_lock(db: psycopg.Connection[Any], pid: int) -> bool:
    row = db.execute(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]
    ).fetchone()
    return row is not None and row["wait_event_type"] == "Lock"


@pytest.mark.parametrize("first", ["newer", "older"])
def test_a_late_writer_of_a_lower_sequence_never_replaces_the_newest_outcome(
    db, database_url, first
) -> None:
    """The race of guarantee 9 in the trigger, with two sessions: one ends the task's newer
    occurrence (seq 2, failed), the other its older one (seq 1, success), each holding its
    transaction open; the second to write waits on the first's task_latest row (checked in
    pg_stat_activity) and is released by the first's commit. Fails on a trigger without the
    sequence guard: with the older end committed last (`first` = newer) the row would show seq
    1; the success part still moves to seq 1, since no success was newer."""
    task = _task(db, "raced")
    older, newer = _running(db, task, 1), _running(db, task, 2)
    ends = {"newer": (newer, "failed", "boom"), "older": (older, "success", None)}
    second = "older" if first == "newer" else "newer"
    with (
        psycopg.connect(database_url) as one,
        psycopg.connect(database_url) as two,
    ):
        _end(one, *ends[first])  # holds task_latest's row until it commits
        errors: list[BaseException] = []

        def end_second() -> None:
            try:
                _end(two, *ends[second])
                two.commit()
            except Exception as error:  # surfaced by the assertion below
                errors.append(error)

        writer = threading.Thread(target=end_second)
        writer.start()
        wait_for(
            lambda: _waiting_for_a_lock(db, two.info.backend_pid),
            message="the second writer waiting on task_latest's row",
        )
        one.commit()
        writer.join(timeout=30)
        assert not writer.is_alive()
        assert not errors, errors
    latest = _latest(db, task)
    assert (latest["occurrence_seq"], latest["occurrence_id"], latest["status"]) == (
        2,
        newer,
        "failed",
    )
    assert latest["error"] == "boom"
    assert latest["success_seq"] == 1
    assert db.execute(LATEST).fetchall() == db.execute(NEWEST_FROM_OCCURRENCES).fetchall()


def test_tasks_show_and_list_show_the_newest_outcome_by_sequence(cli, db) -> None:
    """Fails on a reader that shows the last outcome written rather than the newest by
    sequence: seq 3 (cancelled, its reason shown as the error) ended first, then seq 2 and seq 1;
    a `skipped` seq 4 is never shown."""
    task = _task(db, "job")
    seqs = {seq: _running(db, task, seq) for seq in (1, 2, 3)}
    _end(db, seqs[3], "cancelled")
    _end(db, seqs[2], "failed", "exit 1")
    _end(db, seqs[1], "success")
    skipped = db.execute(
        """INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap,
                                  status, reason, not_before, finished_at)
           VALUES (%s, 4, now(), 'schedule', 'allow', 'skipped', 'overlap', now(), now())
           RETURNING id""",
        [task],
    ).fetchone()
    assert skipped is not None
    shown = cli("tasks", "show", "job", "--json").json()
    assert (shown["last_outcome_seq"], shown["last_status"], shown["last_error"]) == (
        3,
        "cancelled",
        "planted",
    )
    (listed,) = cli("tasks", "list", "--json").json()
    assert (listed["last_outcome_seq"], listed["last_status"]) == (3, "cancelled")
    assert db.execute(LATEST).fetchall() == db.execute(NEWEST_FROM_OCCURRENCES).fetchall()


def test_what_the_daemon_ends_is_what_task_latest_shows(
    client, pool, executors, database_url, db
) -> None:
    """Through the real completer (batched successes, failures, a retry): task_latest equals
    the newest outcome and newest success read from the occurrences, task by task."""
    ok = shell_task(client, name="ok", overlap="allow")
    bad = shell_task(client, name="bad", command="exit 3", overlap="allow")
    for task in (ok, bad, ok, ok, bad):
        client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")

    def all_ended() -> bool:
        replica.launcher.run_once()
        replica.finished()
        replica.completer.run_once()
        left = query(database_url, "SELECT count(*) AS n FROM occurrence WHERE finished_at IS NULL")
        return left[0]["n"] == 0

    wait_for(all_ended, timeout=60, message="the five firings to end")
    assert db.execute(LATEST).fetchall() == db.execute(NEWEST_FROM_OCCURRENCES).fetchall()
    assert _latest(db, ok.id)["status"] == "success"
    assert (_latest(db, bad.id)["status"], _latest(db, bad.id)["success_seq"]) == ("failed", 0)
    shown = client.get_task(bad.id)
    assert (shown.last_outcome_seq, shown.last_status) == (2, "failed")


def test_the_gauges_read_as_the_occurrences_say(db, pool) -> None:
    """The per-task gauges from task_latest equal ADR 0026's read of the occurrences, over tasks
    whose outcomes end in a random order (late successes and failures among them): fails on a
    newest success taken as the last one written, or a failures bound that drops a failure of a
    higher sequence."""
    rng = random.Random(47)
    for n in range(12):
        task = _task(db, f"t{n:02}")
        seqs = list(range(1, rng.randint(1, 14)))
        ids = {seq: _running(db, task, seq) for seq in seqs}
        rng.shuffle(seqs)
        for seq in seqs:
            _end(db, ids[seq], rng.choice((*ENDED[:-1], "success", "failed")))
    figures, _ = task_sample.sample(pool, 100)
    got = {f.task: (f.last_success, f.failures) for f in figures}
    want = {
        r["task"]: (
            None if r["last_success"] is None else r["last_success"].timestamp(),
            r["failures"],
        )
        for r in db.execute(GAUGES_FROM_OCCURRENCES, {"cap": FAILURES_CAP}).fetchall()
    }
    assert got == want
    assert any(failures for _, failures in want.values())
    assert any(success for success, _ in want.values())


def test_a_failure_of_a_higher_sequence_that_ended_before_the_success_still_counts(
    db, pool
) -> None:
    """`allow` overlaps firings: seq 2 fails while seq 1 runs on, then seq 1 succeeds. The
    failures since the last success are those of a higher sequence (ADR 0026's meaning), so
    1. Fails on a count bounded by the success's finish (seq 2 ended before it); the bound by
    when the success's row was made keeps it."""
    task = _task(db, "overlapping")
    first, second = _running(db, task, 1), _running(db, task, 2)
    _end(db, second, "failed")
    _end(db, first, "success")
    (figures,), _ = task_sample.sample(pool, 10)
    assert figures.failures == 1
    assert figures.last_success is not None
    latest = _latest(db, task)
    assert (latest["occurrence_seq"], latest["status"], latest["success_seq"]) == (2, "failed", 1)


def test_a_pruned_success_leaves_its_gauge_and_its_bound(cli, db, pool, database_url) -> None:
    """The prune keeps the newest outcome (task_latest's occurrence stays) but may take the
    newest success behind it: the gauge still reads that success's finish from task_latest (it
    read an older success, or none, from the occurrences), and the failures kept after it still
    count."""
    task = _task(db, "pruned")
    old = [_running(db, task, seq) for seq in (1, 2, 3)]
    for occurrence, status in zip(old, ("failed", "success", "failed"), strict=True):
        _end(db, occurrence, status)
    db.execute(
        "UPDATE occurrence SET created_at = created_at - interval '40 days', "
        "finished_at = finished_at - interval '40 days' WHERE task_id = %s",
        [task],
    )
    db.execute(
        "UPDATE task_latest SET success_finished_at = success_finished_at - interval '40 days', "
        "success_created_at = success_created_at - interval '40 days' WHERE task_id = %s",
        [task],
    )
    _end(db, _running(db, task, 4), "failed")
    assert cli("config", "set", "history-retention", "30d").code == 0
    assert cli("prune", "--json").json()["occurrences"] == 3  # all but the newest outcome
    latest = _latest(db, task)
    assert latest["occurrence_seq"] == 4
    assert db.execute(
        "SELECT 1 FROM occurrence WHERE id = %s", [latest["occurrence_id"]]
    ).fetchone()
    (figures,), _ = task_sample.sample(pool, 10)
    assert figures.last_success == latest["success_finished_at"].timestamp()
    assert figures.failures == 1  # seq 4 (seq 3, pruned, no longer counts)
    assert cli("tasks", "show", "pruned", "--json").json()["last_outcome_seq"] == 4


def test_the_trigger_works_on_a_history_partitioned_by_its_finish(db) -> None:
    """PostgreSQL 15 clones a trigger made on a partitioned parent to every partition, those
    attached later included, and an UPDATE that moves a row to another partition fires AFTER
    INSERT there (not AFTER UPDATE): so an end written as an UPDATE, or as a DELETE and an INSERT
    of the ended row through the parent, reaches task_latest once, and a move of an ended row
    changes nothing. Fails if either the clone or the moved row's trigger were missing."""
    db.execute(
        "CREATE TABLE occurrence_parted (LIKE occurrence INCLUDING DEFAULTS) "
        "PARTITION BY RANGE (finished_at)"
    )
    db.execute("CREATE TABLE occurrence_parted_hot PARTITION OF occurrence_parted DEFAULT")
    for name, when in (("insert", "INSERT"), ("end", "UPDATE")):
        condition = (
            "new.finished_at IS NOT NULL AND new.status <> 'skipped'"
            if when == "INSERT"
            else "old.finished_at IS NULL AND new.finished_at IS NOT NULL"
            " AND new.status <> 'skipped'"
        )
        db.execute(
            f"CREATE TRIGGER parted_latest_on_{name} AFTER {when} ON occurrence_parted "
            f"FOR EACH ROW WHEN ({condition}) EXECUTE FUNCTION task_latest_record()"
        )
    # A dated partition made after the triggers, as the upkeep would.
    db.execute(
        "CREATE TABLE occurrence_parted_today PARTITION OF occurrence_parted "
        "FOR VALUES FROM (now() - interval '1 day') TO (now() + interval '1 day')"
    )
    cloned = db.execute(
        "SELECT tgrelid::regclass::text AS rel, count(*) AS n FROM pg_trigger "
        "WHERE tgname LIKE 'parted_latest_%%' GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert [(r["rel"], r["n"]) for r in cloned] == [
        ("occurrence_parted", 2),
        ("occurrence_parted_hot", 2),
        ("occurrence_parted_today", 2),
    ]
    task = _task(db, "parted")
    columns = (
        "id, task_id, occurrence_seq, scheduled_for, trigger, overlap, status, not_before, "
        "created_at"
    )
    for seq in (1, 2):
        db.execute(
            f"INSERT INTO occurrence_parted ({columns}) VALUES "
            "(%s, %s, %s, now(), 'schedule', 'allow', 'running', now(), now())",
            [1000 + seq, task, seq],
        )
    # seq 2 ends as an UPDATE that moves it from the hot partition to today's.
    db.execute(
        "UPDATE occurrence_parted SET status = 'failed', finished_at = now() WHERE id = 1002"
    )
    assert db.execute(
        "SELECT tableoid::regclass::text AS rel FROM occurrence_parted WHERE id = 1002"
    ).fetchone() == {"rel": "occurrence_parted_today"}
    latest = _latest(db, task)
    assert (latest["occurrence_seq"], latest["status"]) == (2, "failed")
    # seq 1 ends late, as a DELETE from the hot set and an INSERT of the ended row: its success
    # moves the success part only.
    db.execute(
        f"""WITH gone AS (DELETE FROM occurrence_parted WHERE id = 1001 RETURNING *)
            INSERT INTO occurrence_parted ({columns}, finished_at)
            SELECT id, task_id, occurrence_seq, scheduled_for, trigger, overlap, 'success',
                   not_before, created_at, now() FROM gone"""
    )
    latest = _latest(db, task)
    assert (latest["occurrence_seq"], latest["status"], latest["success_seq"]) == (2, "failed", 1)
    before = _latest(db, task)
    # A move of an ended row (say, out of a partition being dropped) is a no-op.
    db.execute(
        f"""WITH gone AS (DELETE FROM occurrence_parted WHERE id = 1002 RETURNING *)
            INSERT INTO occurrence_parted ({columns}, finished_at)
            SELECT id, task_id, occurrence_seq, scheduled_for, trigger, overlap, status,
                   not_before, created_at, finished_at FROM gone"""
    )
    assert _latest(db, task) == before
    db.execute("DROP TABLE occurrence_parted")


def test_every_task_has_its_row_from_its_first_moment(client, db) -> None:
    """The success path locks its tasks' rows before it ends their occurrences (in task id
    order, succeed_runs.sql), so every task must have one before its first outcome."""
    task = shell_task(client, name="fresh")
    assert _latest(db, task.id) | {"task_id": 0} == {
        "task_id": 0,
        "occurrence_seq": 0,
        "occurrence_id": None,
        "scheduled_for": None,
        "status": None,
        "finished_at": None,
        "error": None,
        "success_seq": 0,
        "success_finished_at": None,
        "success_created_at": None,
    }
    assert db.execute("SELECT count(*) AS n FROM task_latest").fetchone() == {"n": 1}


def _running_run(db: psycopg.Connection[Any], task_id: int, seq: int) -> tuple[int, int]:
    """A running occurrence of the task and its running run, owned by `me` at token 1."""
    occurrence = _running(db, task_id, seq)
    row = db.execute(
        """INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at,
                           takeover_at, status, started_at, build_revision)
           VALUES (%s, 1, 'me', 1, now() + interval '1 hour', now() + interval '1 hour',
                   'running', now(), 'b') RETURNING id""",
        [occurrence],
    ).fetchone()
    assert row is not None
    return occurrence, int(row["id"])


def test_a_success_batch_of_two_tasks_takes_their_rows_in_task_order(db, database_url) -> None:
    """Two success batches holding the same two tasks must take their task_latest rows in one
    order, or they can wait on each other in a cycle. A batch whose runs come in the other order
    (task B's run first) is held at B's row by a second session: it must already hold A's (a
    third session's NOWAIT on A fails). Fails on a sd_succeed_runs_v4 without the ordered lock:
    its ends update B's row first and wait there, A's row still free."""
    first, second = _task(db, "a"), _task(db, "b")
    occurrence_b, run_b = _running_run(db, second, 1)
    occurrence_a, run_a = _running_run(db, first, 1)
    with (
        psycopg.connect(database_url) as holder,
        psycopg.connect(database_url) as batch,
        psycopg.connect(database_url) as probe,
    ):
        holder.execute("SELECT 1 FROM task_latest WHERE task_id = %s FOR UPDATE", [second])
        done: list[Any] = []

        def succeed() -> None:
            try:
                done.extend(
                    batch.execute(
                        "SELECT sd_succeed_runs_v4(%s, %s, %s, %s, %s, %s, %s, %s, 'me', 'c', "
                        "false, NULL)",
                        [
                            [run_b, run_a],
                            [1, 1],
                            [occurrence_b, occurrence_a],
                            [second, first],
                            [0, 0],
                            [None, None],
                            [None, None],
                            [None, None],
                        ],
                    ).fetchall()
                )
                batch.commit()
            except Exception as error:  # surfaced by the assertion below
                done.append(error)

        writer = threading.Thread(target=succeed)
        writer.start()
        wait_for(
            lambda: _waiting_for_a_lock(db, batch.info.backend_pid),
            message="the batch waiting on task b's row",
        )
        try:
            probe.execute("SELECT 1 FROM task_latest WHERE task_id = %s FOR UPDATE NOWAIT", [first])
            a_was = "free"
        except psycopg.errors.LockNotAvailable:
            a_was = "held by the batch"
        finally:
            probe.rollback()
            holder.commit()  # the batch goes on, whatever was found
        writer.join(timeout=30)
        assert not writer.is_alive()
    assert a_was == "held by the batch"
    assert sorted(r[0] for r in done) == sorted([run_a, run_b]), done
    assert (_latest(db, first)["success_seq"], _latest(db, second)["success_seq"]) == (1, 1)
