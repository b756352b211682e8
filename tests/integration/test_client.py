"""The Client's connection (reused, closed, reopened after a fork or a lost connection, through
PgBouncer) and its bulk calls (`add_tasks`, `trigger(count=N)`) with their refusals."""

import gc
import os
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from scheduler_daemon.client import MAX_TRIGGER_COUNT, Client
from scheduler_daemon.domain.argument import InvalidArgument
from scheduler_daemon.domain.task import InvalidTask, TaskSpec
from scheduler_daemon.storage.error import Conflict, NotFound
from tests.support import wait_for


def _spec(name: str, **fields: Any) -> TaskSpec:
    fields.setdefault("every", timedelta(hours=1))
    fields.setdefault("overlap", "allow")
    fields.setdefault("executor", "shell")
    fields.setdefault("target", "true")
    return TaskSpec(name=name, **fields)


def _backends(db: psycopg.Connection[Any]) -> list[int]:
    """The client sessions (not the test's own) connected to the test database."""
    rows = db.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = 'scheduler-daemon' AND pid <> pg_backend_pid() ORDER BY pid"
    ).fetchall()
    return [row["pid"] for row in rows]


# -- the connection ------------------------------------------------------------------------------
def test_calls_reuse_one_connection_until_close_and_a_later_call_opens_another(
    database_url, db
) -> None:
    client = Client(database_url)
    client.add_task(_spec("a"))
    first = _backends(db)
    for _ in range(5):
        client.trigger("a", requested_by="test")
        client.get_task("a")
    assert len(first) == 1
    assert _backends(db) == first
    client.close()
    wait_for(lambda: _backends(db) == [], message="the closed session to end")
    client.trigger("a", requested_by="test")
    assert len(_backends(db)) == 1
    client.close()
    client.close()  # closing twice is harmless


def test_the_context_manager_closes_the_connection(database_url, db) -> None:
    with Client(database_url) as client:
        client.add_task(_spec("a"))
        assert len(_backends(db)) == 1
    wait_for(lambda: _backends(db) == [], message="the closed session to end")


def test_a_refused_call_rolls_back_and_leaves_the_connection_usable(client, counts) -> None:
    client.add_task(_spec("a"))
    before = counts()
    with pytest.raises(Conflict, match="a task named 'a' already exists"):
        client.add_task(_spec("a"))
    with pytest.raises(NotFound):
        client.trigger("nope", requested_by="test")
    assert counts() == before
    assert client.trigger("a", requested_by="test").status == "queued"


def test_a_connection_that_died_while_idle_is_replaced_by_the_next_call(client, db) -> None:
    client.add_task(_spec("a"))
    (backend,) = _backends(db)
    db.execute("SELECT pg_terminate_backend(%s, 10000)", (backend,))
    # The next call's first statement meets the dead socket; nothing was written yet, so the
    # client opens a new connection and the call succeeds (a client that only reused the
    # connection would raise DatabaseUnavailable here, and on every call after it).
    assert client.trigger("a", requested_by="test").status == "queued"
    wait_for(lambda: backend not in _backends(db), message="the terminated session to end")
    assert len(_backends(db)) == 1


def test_a_connection_lost_inside_a_call_is_one_line_and_the_next_call_reconnects(
    client, db
) -> None:
    from scheduler_daemon.storage.error import DatabaseUnavailable

    client.add_task(_spec("a"))

    # Past the transaction's first statement nothing is retried (part of the call may have been
    # sent): the caller hears DatabaseUnavailable, and the dead connection is not kept.
    def call_that_loses_its_connection() -> None:
        with client._session.transaction() as tx:
            db.execute("SELECT pg_terminate_backend(%s, 10000)", (tx.conn.info.backend_pid,))
            tx.conn.execute("SELECT 1")

    with pytest.raises(DatabaseUnavailable, match=r"^lost the database connection: ") as lost:
        call_that_loses_its_connection()
    assert "\n" not in str(lost.value)
    assert client.get_task("a").name == "a"


def test_a_forked_child_opens_its_own_connection_and_leaves_the_parents_alone(client, db) -> None:
    client.add_task(_spec("a"))
    (parent_backend,) = _backends(db)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: use the inherited client, close it, let the GC run, exit
        code = 1
        try:
            occurrence = client.trigger("a", requested_by="child")
            client.close()
            gc.collect()
            os.write(write_end, str(occurrence.id).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    child_occurrence = os.read(read_end, 100).decode()
    os.close(read_end)
    assert os.waitstatus_to_exitcode(status) == 0
    # A client that reused the inherited socket in the child would interleave two processes'
    # messages on one session, and a close there would end the parent's session: the parent's
    # next call would fail, and its backend would be gone.
    assert parent_backend in _backends(db)
    occurrence = client.trigger("a", requested_by="parent")
    wait_for(lambda: _backends(db) == [parent_backend], message="the child's session to end")
    rows = db.execute("SELECT id, requested_by FROM occurrence ORDER BY id").fetchall()
    assert rows == [
        {"id": int(child_occurrence), "requested_by": "child"},
        {"id": occurrence.id, "requested_by": "parent"},
    ]


def test_threads_take_turns_on_the_one_connection(client, db) -> None:
    client.add_task(_spec("a"))
    errors: list[BaseException] = []

    def trigger_some() -> None:
        try:
            for _ in range(20):
                client.trigger("a", requested_by="thread")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=trigger_some) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    seqs = [r["occurrence_seq"] for r in db.execute("SELECT occurrence_seq FROM occurrence")]
    assert sorted(seqs) == list(range(1, 81))
    assert len(_backends(db)) == 1


@pytest.fixture
def bouncer(server_url: str) -> Iterator[Any]:
    from tests.pgbouncer import running_bouncer

    yield from running_bouncer(server_url)


@pytest.mark.slow
def test_the_reused_connection_works_through_pgbouncer_in_transaction_mode(
    bouncer, database_url, db
) -> None:
    # Prepared statements or session state would break here once PgBouncer hands the client's
    # transactions to different server connections; other clients' traffic makes it do so.
    with (
        Client(bouncer.url_for(database_url)) as client,
        Client(bouncer.url_for(database_url)) as other,
    ):
        client.add_tasks([_spec("a"), _spec("b")])
        for _ in range(10):
            client.trigger("a", requested_by="test")
            other.trigger("b", requested_by="test", count=3)
            client.get_task("b")
        assert client.trigger("a", requested_by="test", count=5).count == 5
    counts = db.execute(
        "SELECT t.name, count(*) AS n FROM occurrence o JOIN task t ON t.id = o.task_id "
        "GROUP BY t.name ORDER BY t.name"
    ).fetchall()
    assert counts == [{"name": "a", "n": 15}, {"name": "b", "n": 30}]


# -- add_tasks -----------------------------------------------------------------------------------
def test_add_tasks_inserts_every_task_in_order_as_add_task_would(client, db) -> None:
    specs = [
        _spec("hourly"),
        _spec("cron", every=None, cron="*/5 * * * *", timezone="Europe/Paris"),
        _spec("http", executor="http", target="http://127.0.0.1:9/x", headers=(("A", "b"),)),
        _spec("limits", max_attempts=3, timeout=timedelta(seconds=9), concurrency_key="k"),
    ]
    added = client.add_tasks(specs)
    assert [t.name for t in added] == [s.name for s in specs]
    single = client.add_task(_spec("single", every=None, cron="*/5 * * * *"))
    assert added[1].next_run_at == single.next_run_at
    for task, spec in zip(added, specs, strict=True):
        assert task.spec == spec
        assert task == client.get_task(task.name)
    assert added[2].spec.payload == {"url": "http://127.0.0.1:9/x", "headers": {"A": "b"}}
    events = db.execute("SELECT count(*) AS n FROM task_event").fetchone()
    assert events["n"] == 5  # the insert trigger recorded each task, as for add_task
    assert client.add_tasks([]) == []


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (_spec("x", every=None), "task 'x': give exactly one schedule"),
        (_spec("x", every=None, cron="61 * * * *"), "task 'x': "),
        (_spec("x", max_attempts=0), "task 'x': --max-attempts must be at least 1"),
        (_spec("ok1"), "task 'ok1' is given more than once"),
    ],
)
def test_add_tasks_refuses_the_whole_batch_with_one_line_naming_the_task(
    client, counts, bad, error
) -> None:
    before = counts()
    with pytest.raises(InvalidTask) as refused:
        client.add_tasks([_spec("ok1"), bad, _spec("ok2")])
    assert str(refused.value).startswith(error)
    assert "\n" not in str(refused.value)
    assert counts() == before


def test_add_tasks_refuses_a_past_instant_by_the_database_clock(client, counts) -> None:
    from datetime import UTC, datetime

    before = counts()
    past = _spec("once", every=None, at=datetime(2020, 1, 1, tzinfo=UTC))
    with pytest.raises(InvalidTask, match=r"^task 'once': --at 2020-01-01T00:00:00\+00:00 is in"):
        client.add_tasks([_spec("ok"), past])
    assert counts() == before


def test_add_tasks_refuses_a_taken_name_and_writes_nothing(client, counts) -> None:
    client.add_task(_spec("taken"))
    before = counts()
    with pytest.raises(Conflict, match=r"^a task named 'taken' already exists$"):
        client.add_tasks([_spec("new"), _spec("taken")])
    assert counts() == before
    assert [t.name for t in client.list_tasks()] == ["taken"]


# -- trigger(count=N) ----------------------------------------------------------------------------
def test_trigger_with_a_count_queues_that_many_in_sequence(client, db) -> None:
    task = client.add_task(_spec("bulk", concurrency_key="k"))
    client.trigger("bulk", requested_by="test")
    result = client.trigger("bulk", requested_by="bulk-test", count=500)
    assert (result.task_name, result.count, result.status) == ("bulk", 500, "queued")
    rows = db.execute(
        "SELECT id, occurrence_seq, status, trigger, overlap, concurrency_key, requested_by, "
        "scheduled_for = not_before AS due FROM occurrence WHERE occurrence_seq > 1 ORDER BY id"
    ).fetchall()
    assert [r["id"] for r in rows] == result.occurrence_ids
    assert [r["occurrence_seq"] for r in rows] == list(range(2, 502))
    assert {
        (r["status"], r["trigger"], r["overlap"], r["concurrency_key"], r["requested_by"], r["due"])
        for r in rows
    } == {("queued", "manual", "allow", "k", "bulk-test", True)}
    assert client.get_task(task.id).occurrence_seq == 501
    assert client.trigger("bulk", requested_by="test").occurrence_seq == 502


def test_trigger_with_a_count_on_a_queue_task_queues_them_all(client) -> None:
    client.add_task(_spec("q", overlap="queue"))
    assert client.trigger("q", requested_by="test", count=3).count == 3
    assert client.status()["queue_depth"] == 3


@pytest.mark.parametrize("count", [0, -1, MAX_TRIGGER_COUNT + 1])
def test_trigger_refuses_a_count_out_of_range(client, counts, count) -> None:
    client.add_task(_spec("a"))
    before = counts()
    with pytest.raises(InvalidArgument, match=rf"^--count must be 1 to 100,000, got {count}$"):
        client.trigger("a", requested_by="test", count=count)
    assert counts() == before


def test_trigger_refuses_a_count_on_a_forbid_task_in_one_line(client, counts) -> None:
    client.add_task(_spec("f", overlap="forbid"))
    before = counts()
    with pytest.raises(Conflict) as refused:
        client.trigger("f", requested_by="test", count=2)
    assert str(refused.value) == (
        "task 'f' has --overlap forbid (one active occurrence at a time): --count 2 would skip "
        "all but one; use --overlap queue or allow"
    )
    assert counts() == before
    assert client.trigger("f", requested_by="test", count=1).status == "queued"


@pytest.mark.parametrize("count", [1, 2])
def test_a_trigger_runs_a_finished_one_shot_and_leaves_its_status(client, db, count) -> None:
    # Issue 31: only a one-shot's firings decide its status; a manual trigger queues runs of
    # it and changes nothing else (the parent commit moved it back to `running`).
    from datetime import UTC, datetime

    client.add_task(_spec("once", every=None, at=datetime(2099, 1, 1, tzinfo=UTC)))
    db.execute("UPDATE task SET status = 'completed', next_run_at = NULL")
    client.trigger("once", requested_by="test", count=count)
    assert client.get_task("once").status == "completed"
    queued = db.execute("SELECT count(*) AS n FROM occurrence WHERE status = 'queued'").fetchone()
    assert queued["n"] == count
    assert client.get_task("once").next_run_at is None


def test_the_cli_triggers_a_count_and_refuses_one_on_a_forbid_task(cli, counts) -> None:
    cli("tasks", "add", "many", "--every", "1h", "--command", "true", "--overlap", "allow")
    cli("tasks", "add", "one", "--every", "1h", "--command", "true")
    done = cli("tasks", "trigger", "many", "--count", "4", "--json")
    assert done.code == 0, done.err
    assert done.json()["count"] == 4
    text = cli("tasks", "trigger", "many", "--count", "2")
    assert text.out.startswith("2 occurrences queued (ids ")
    before = counts()
    refused = cli("tasks", "trigger", "one", "--count", "3")
    assert refused.code == 2
    assert refused.err.startswith("error: task 'one' has --overlap forbid")
    assert refused.err.count("\n") == 1
    assert counts() == before


# -- one trigger: lock, sequence number, insert and wake-up in few round trips --------------------
def test_a_trigger_at_a_pinned_now_records_that_time_and_the_next_sequence_number(client, db):
    from datetime import UTC, datetime

    pinned = datetime(2030, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    task = client.add_task(_spec("a"), now=pinned)
    first = client.trigger("a", requested_by="test", now=pinned)
    later = pinned + timedelta(minutes=1)
    second = client.trigger(str(task.id), requested_by="someone", now=later)
    # The clock is read with the BEGIN, before the lock: the pinned time, not the server's.
    rows = db.execute(
        "SELECT id, occurrence_seq, scheduled_for, not_before, created_at, updated_at, trigger, "
        "requested_by, finished_at FROM occurrence ORDER BY id"
    ).fetchall()
    assert rows == [
        {
            "id": o.id,
            "occurrence_seq": seq,
            "scheduled_for": at,
            "not_before": at,
            "created_at": at,
            "updated_at": at,
            "trigger": "manual",
            "requested_by": by,
            "finished_at": None,
        }
        for o, seq, at, by in ((first, 1, pinned, "test"), (second, 2, later, "someone"))
    ]
    assert (first.task_name, first.scheduled_for, first.occurrence_seq) == ("a", pinned, 1)
    assert client.get_task("a").occurrence_seq == 2


def test_a_trigger_whose_insert_fails_writes_nothing_and_the_next_call_works(client, db) -> None:
    """The trigger's insert is sent with its COMMIT in one round trip. A test trigger on the
    table makes the insert fail: the COMMIT must stay unrun (no sequence number taken, nothing
    written) and the reused connection must come back ready, not inside a failed transaction
    (the next call on it would then fail with "current transaction is aborted")."""
    client.add_task(_spec("a"))
    db.execute(
        "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql "
        "AS $$BEGIN RAISE EXCEPTION 'refused by the test'; END$$"
    )
    db.execute(
        "CREATE TRIGGER test_refuse BEFORE INSERT ON occurrence "
        "FOR EACH ROW EXECUTE FUNCTION test_refuse()"
    )
    db.commit()
    try:
        with pytest.raises(psycopg.Error, match="refused by the test"):
            client.trigger("a", requested_by="test")
    finally:
        db.execute("DROP TRIGGER test_refuse ON occurrence")
        db.execute("DROP FUNCTION test_refuse()")
        db.commit()
    assert client.get_task("a").occurrence_seq == 0
    assert db.execute("SELECT count(*) AS n FROM occurrence").fetchone()["n"] == 0
    assert client.trigger("a", requested_by="test").occurrence_seq == 1


def _waiting_for_a_lock(db: psycopg.Connection[Any]) -> bool:
    row = db.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = 'scheduler-daemon' AND wait_event_type = 'Lock'"
    ).fetchone()
    return bool(row and row["n"])


@pytest.mark.parametrize(("overlap", "status"), [("allow", "queued"), ("forbid", "skipped")])
def test_a_trigger_waiting_for_the_task_lock_sees_what_its_holder_committed(
    client, db, database_url, overlap, status
) -> None:
    """The interleaving of two triggers, forced: a holder (standing in for the other trigger)
    locks the task, takes sequence number 1 and queues its occurrence; our trigger waits for
    the lock meanwhile. Everything it reads to decide must be read after the lock: a version
    that allocated the number from a row read before the lock (or with the BEGIN's snapshot)
    would reuse 1 (occurrence_task_seq_key refuses it: the call fails), and one that counted a
    `forbid` task's active occurrences in the locking statement (its snapshot predates the
    holder's commit) would queue a second one (occurrence_forbid_active_key refuses it)."""
    client.add_task(_spec("a", overlap=overlap))
    result: list[Any] = []
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT id FROM task WHERE name = 'a' FOR UPDATE")
        holder.execute(
            "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, "
            "status, requested_by, not_before) SELECT id, 1, now(), 'manual', overlap, 'queued', "
            "'holder', now() FROM task WHERE name = 'a'"
        )
        holder.execute("UPDATE task SET occurrence_seq = 1 WHERE name = 'a'")

        def trigger() -> None:
            try:
                result.append(client.trigger("a", requested_by="waiter"))
            except BaseException as exc:
                result.append(exc)

        waiter = threading.Thread(target=trigger)
        waiter.start()
        wait_for(lambda: _waiting_for_a_lock(db), message="the trigger to wait for the lock")
        holder.commit()
    waiter.join(timeout=30)
    (occurrence,) = result
    assert not isinstance(occurrence, BaseException), occurrence
    assert (occurrence.occurrence_seq, occurrence.status) == (2, status)
    if status == "skipped":
        assert occurrence.reason == "overlap"
    seqs = [r["occurrence_seq"] for r in db.execute("SELECT occurrence_seq FROM occurrence")]
    assert sorted(seqs) == [1, 2]
    assert client.get_task("a").occurrence_seq == 2


# -- one add_task: insert and wake-up in one statement, no savepoint ------------------------------
def _wakeups(listener: psycopg.Connection[Any]) -> list[str]:
    return [n.payload for n in listener.notifies(timeout=0.2, stop_after=10)]


def test_add_task_wakes_the_daemons_with_its_due_time_and_a_taken_name_wakes_nobody(
    client, database_url, counts
) -> None:
    from scheduler_daemon.storage import instance_store

    with psycopg.connect(database_url, autocommit=True) as listener:
        instance_store.listen_wakeups(listener)
        # A timezone of its own: the payload still reads the due time as the database returns it.
        task = client.add_task(_spec("a", every=None, cron="0 9 * * *", timezone="Europe/Paris"))
        assert task.next_run_at is not None
        assert _wakeups(listener) == [f"task_added {task.next_run_at.isoformat()}"]
        before = counts()
        with pytest.raises(Conflict, match=r"^a task named 'a' already exists$"):
            client.add_task(_spec("a"))
        assert counts() == before
        assert _wakeups(listener) == []
        assert client.add_task(_spec("b", paused=True)).name == "b"
        assert len(_wakeups(listener)) == 1


def test_a_taken_name_leaves_the_callers_transaction_usable(client) -> None:
    # `tasks apply` adds inside its own transaction: the refusal must not abort it (it was a
    # savepoint; now the insert does nothing on the taken name and no error reaches the server).
    client.add_task(_spec("a"))
    with client._tx() as conn:
        with pytest.raises(Conflict):
            client.add_in(conn, _spec("a"))
        assert client.add_in(conn, _spec("b")).name == "b"
    assert [t.name for t in client.list_tasks()] == ["a", "b"]
