"""The history's partition upkeep (issue 47 items 2-4 and 6, ADR 0033): sd_partitions_v1
creates the dated partitions ahead and for rows that fell into the DEFAULT partition, and drops
those past the retention keeping what the keep rule keeps, raising `task_pruned` and deleting
the dropped firings' keys and delivered notifications; a held lock makes it give up within its
lock_timeout, a second caller is told `busy`; the interval is refused outside its bounds; the
reader reads history only through the parent; a daemon whose upkeep fails goes on.

Until the model's migration makes `occurrence` and `run` partitioned (branch wt-model), the
`partitioned` fixture converts the test database to that shape itself (STAND_IN below: the
same columns and CHECKs, `PARTITION BY RANGE (finished_at)` with the DEFAULT partitions
`occurrence_active` and `run_active`, and `firing_key`); on a database the baseline already
made partitioned it changes nothing.
"""

import itertools
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from scheduler_daemon.storage import partition_store, roles
from tests.support import free_port, http_get, query, wait_for

STAND_IN = """
ALTER TABLE run DROP CONSTRAINT IF EXISTS run_occurrence_fkey;
ALTER TABLE notification_outbox DROP CONSTRAINT IF EXISTS notification_outbox_occurrence_id_fkey;
ALTER TABLE occurrence RENAME TO occurrence_old;
ALTER TABLE run RENAME TO run_old;
CREATE TABLE occurrence (LIKE occurrence_old INCLUDING DEFAULTS INCLUDING CONSTRAINTS
    INCLUDING IDENTITY) PARTITION BY RANGE (finished_at);
CREATE TABLE occurrence_active PARTITION OF occurrence DEFAULT;
CREATE INDEX ON occurrence (id);
CREATE INDEX ON occurrence (task_id, occurrence_seq);
CREATE TABLE run (LIKE run_old INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY)
    PARTITION BY RANGE (finished_at);
CREATE TABLE run_active PARTITION OF run DEFAULT;
CREATE INDEX ON run (id);
CREATE INDEX ON run (occurrence_id, id);
DROP TABLE occurrence_old, run_old CASCADE;
CREATE TABLE IF NOT EXISTS firing_key (task_id bigint NOT NULL,
    scheduled_for timestamptz NOT NULL, trigger text NOT NULL,
    PRIMARY KEY (task_id, scheduled_for, trigger));
"""


def _is_partitioned(url: str) -> bool:
    found = query(
        url, "SELECT 1 FROM pg_partitioned_table WHERE partrelid = 'occurrence'::regclass"
    )
    return bool(found)


@pytest.fixture
def partitioned(database_url: str) -> str:
    if not _is_partitioned(database_url):
        from scheduler_daemon.storage import presquash

        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(STAND_IN)
            for view in presquash.baseline_module().VIEWS:  # the one the CASCADE dropped
                if "occurrence_args_shown" in view:
                    conn.execute(view)
    return database_url


def _stand_in(url: str) -> bool:
    """Whether the shape is this file's stand-in (no unique keys the daemon's statements need)."""
    return not query(url, "SELECT 1 FROM pg_class WHERE relname = 'occurrence_task_seq_key'")


def upkeep(url: str) -> dict[str, Any]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return partition_store.upkeep(conn)


def dated(url: str, table: str = "occurrence") -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        rows = partition_store.partitions(conn)
    return [r for r in rows if r["table_name"] == table and not r["is_default"]]


def setting(url: str, key: str, value: str | None) -> None:
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO fleet_setting (key, value, updated_by) VALUES (%s, to_jsonb(%s::text), "
            "'test') ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )


def add_task(cli: Any, name: str, *args: str) -> int:
    added = cli("tasks", "add", name, "--every", "1h", "--command", "true", *args, "--json")
    assert added.code == 0, added.err
    return int(added.json()["id"])


def plant(url: str, task_id: int, seq: int, finished_ago: timedelta, **kw: Any) -> int:
    """An ended scheduled firing with one ended run, its firing key, and a delivered and an
    undelivered notification (in the DEFAULT partition while no dated one covers it)."""
    status = kw.get("status", "success")
    with psycopg.connect(url) as conn:
        (occurrence_id,) = conn.execute(
            "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, "
            "status, reason, not_before, finished_at, attempts, lease_token) "
            "VALUES (%(t)s, %(s)s, now() - %(ago)s - interval '1 minute', 'schedule', 'allow', "
            "%(status)s, %(reason)s, now() - %(ago)s - interval '1 minute', now() - %(ago)s, "
            "1, 1) RETURNING id",
            {
                "t": task_id,
                "s": seq,
                "ago": finished_ago,
                "status": status,
                "reason": "overlap" if status == "skipped" else None,
            },
        ).fetchone()
        conn.execute(
            "INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at, "
            "takeover_at, status, started_at, finished_at, build_revision) "
            "SELECT id, 1, 'planted', 1, finished_at, finished_at, %s, scheduled_for, "
            "finished_at, 'test' FROM occurrence WHERE id = %s",
            (status if status != "skipped" else "success", occurrence_id),
        )
        conn.execute(
            "INSERT INTO firing_key (task_id, scheduled_for, trigger) "
            "SELECT task_id, scheduled_for, trigger FROM occurrence WHERE id = %s",
            (occurrence_id,),
        )
        for event, delivered in (("failure", True), ("timeout", False)):
            conn.execute(
                "INSERT INTO notification_outbox (occurrence_id, task_id, event, payload, "
                "delivered_at) VALUES (%s, %s, %s, '{}', %s)",
                (occurrence_id, task_id, event, datetime.now(UTC) if delivered else None),
            )
    return int(occurrence_id)


def where(url: str, table: str, ids: list[int], column: str = "id") -> dict[int, str]:
    """Each row's partition, by id."""
    rows = query(url, f"SELECT {column} AS id, tableoid::regclass::text AS p FROM {table}")
    return {r["id"]: r["p"] for r in rows if r["id"] in ids}


def test_upkeep_creates_the_partitions_ahead_once_and_status_shows_them(
    partitioned: str, cli: Any
) -> None:
    url = partitioned
    setting(url, "history_partition_interval", "1h")
    done = upkeep(url)
    # From the hour now is in through now + 3 hours (3 intervals, at least 1 hour), both tables.
    assert len(done["created"]) == 8, done
    assert done["partitions_ahead"] == 4
    bounds = [(p["lower_bound"], p["upper_bound"]) for p in dated(url)]
    assert bounds == [(p["lower_bound"], p["upper_bound"]) for p in dated(url, "run")]
    (now,) = query(url, "SELECT now() AS now")
    assert bounds[0][0] <= now["now"] < bounds[0][1]
    assert bounds[-1][1] >= now["now"] + timedelta(hours=3)
    assert all(b[1] - b[0] == timedelta(hours=1) for b in bounds)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    # Again: nothing to do.
    assert upkeep(url)["created"] == []
    shown = cli("partitions", "--json")
    assert shown.code == 0, shown.err
    assert len(shown.json()["partitions"]) == 10  # 4 dated + the DEFAULT, each table
    status = cli("status", "--json")
    assert status.code == 0, status.err
    assert status.json()["partitions"]["partitions_ahead"] == 4
    assert status.json()["partitions"]["last_error"] is None
    assert "history partitions ahead: 4" in cli("status").out
    # A longer interval shapes only what is made after it: the old bounds stay.
    setting(url, "history_partition_interval", "1d")
    again = upkeep(url)
    assert [(p["lower_bound"], p["upper_bound"]) for p in dated(url)][: len(bounds)] == bounds
    later = dated(url)[len(bounds) :]
    assert later, again
    assert later[0]["lower_bound"] == bounds[-1][1]  # no gap, no overlap


def test_rows_fallen_into_the_default_move_out_when_their_partition_is_made(
    partitioned: str, cli: Any
) -> None:
    """An upkeep outage: ended rows whose partition did not exist sit in the DEFAULT partition;
    the next upkeep makes their (past) partitions and moves them there."""
    url = partitioned
    setting(url, "history_partition_interval", "1h")
    task = add_task(cli, "outage")
    planted = [plant(url, task, seq, timedelta(hours=h)) for seq, h in ((1, 5), (2, 2.5))]
    assert set(where(url, "occurrence", planted).values()) == {"occurrence_active"}
    done = upkeep(url)
    assert done["moved_rows"] == 4, done  # 2 occurrences, 2 runs
    found = where(url, "occurrence", planted)
    assert "occurrence_active" not in found.values()
    assert len(set(found.values())) == 2  # each in its own hour
    runs = where(url, "run", planted, column="occurrence_id")
    assert "run_active" not in runs.values()
    # Past retention, a fallen row is the row-by-row prune's: no partition is made for it.
    setting(url, "history_retention", "3h")
    old = plant(url, task, 3, timedelta(hours=6))
    upkeep(url)
    assert where(url, "occurrence", [old]) == {old: "occurrence_active"}


def test_a_drop_keeps_what_the_keep_rule_keeps_and_settles_marks_keys_and_notifications(
    partitioned: str, cli: Any
) -> None:
    url = partitioned
    setting(url, "history_partition_interval", "1h")
    plain = add_task(cli, "plain")
    longer = add_task(cli, "longer", "--history-retention", "10d")
    gone = add_task(cli, "gone")
    # plain: 3 firings 3 hours ago, the newest a skipped one after its newest outcome (seq 2).
    p1 = plant(url, plain, 1, timedelta(hours=3, minutes=10))
    p2 = plant(url, plain, 2, timedelta(hours=3, minutes=5))
    p3 = plant(url, plain, 3, timedelta(hours=3), status="skipped")
    l1 = plant(url, longer, 1, timedelta(hours=3, minutes=10))
    l2 = plant(url, longer, 2, timedelta(hours=3, minutes=5))
    g1 = plant(url, gone, 1, timedelta(hours=3, minutes=10))
    g2 = plant(url, gone, 2, timedelta(hours=3, minutes=5))
    assert cli("tasks", "delete", "gone", "--force").code == 0
    made = upkeep(url)  # no retention yet: the past hour is made and the rows moved there
    assert made["moved_rows"] == 14, made
    setting(url, "history_retention", "1h")
    done = upkeep(url)
    assert "error" not in done, done
    assert len(done["dropped"]) == 2  # the one past hour, of each table
    survivors = set(where(url, "occurrence", [p1, p2, p3, l1, l2, g1, g2]))
    # plain keeps its newest outcome and what follows it; longer keeps all (10 days); the
    # deleted task keeps nothing.
    assert survivors == {p2, p3, l1, l2}
    assert set(where(url, "occurrence", list(survivors)).values()) == {"occurrence_active"}
    assert set(where(url, "run", list(survivors), column="occurrence_id")) == survivors
    assert (done["kept_rows"], done["dropped_rows"]) == (8, 3), done
    marks = {
        r["task_id"]: r["pruned_through"]
        for r in query(url, "SELECT task_id, pruned_through FROM task_pruned")
    }
    scheduled = {
        r["id"]: r["scheduled_for"] for r in query(url, "SELECT id, scheduled_for FROM occurrence")
    }
    assert set(marks) == {plain, gone}
    assert marks[gone] > marks[plain] - timedelta(minutes=1)
    assert marks[plain] < scheduled[p2]  # p1's instant: below what is kept
    keys = query(url, "SELECT task_id, count(*) AS n FROM firing_key GROUP BY task_id")
    assert {r["task_id"]: r["n"] for r in keys} == {plain: 2, longer: 2}
    outbox = query(
        url,
        "SELECT occurrence_id, delivered_at IS NOT NULL AS delivered FROM notification_outbox",
    )
    delivered = {r["occurrence_id"] for r in outbox if r["delivered"]}
    assert delivered == survivors  # the dropped firings' delivered ones are gone
    undelivered = {r["occurrence_id"] for r in outbox if not r["delivered"]}
    assert undelivered == {p1, p2, p3, l1, l2, g1, g2}  # never deleted undelivered


def test_a_lock_held_on_the_history_makes_the_upkeep_give_up_and_the_next_call_succeed(
    partitioned: str, cli: Any
) -> None:
    """Race: a reader holds the DEFAULT partition (ACCESS SHARE, through the parent) when the
    upkeep comes to ATTACH (ACCESS EXCLUSIVE on it). Without the function's lock_timeout the call
    waits for the reader's transaction to end: this test fails on that version (the thread is
    still waiting when joined), and on one that does not record or undo its work."""
    url = partitioned
    setting(url, "history_partition_interval", "1h")
    answers: list[dict[str, Any]] = []
    with psycopg.connect(url) as reader:
        reader.execute("SELECT count(*) FROM occurrence")  # holds it until the transaction ends
        began = time.monotonic()
        caller = threading.Thread(target=lambda: answers.append(upkeep(url)), daemon=True)
        caller.start()
        caller.join(timeout=20)
        waited = time.monotonic() - began
        assert not caller.is_alive(), "the upkeep waited for the reader's lock"
        (answer,) = answers
        assert answer.get("sqlstate") == "55P03", answer
        assert dated(url) == []  # its work undone
        status = cli("status", "--json").json()["partitions"]
        assert status["last_sqlstate"] == "55P03"
        assert "lock timeout" in status["last_error"]
        assert "last error at" in cli("status").out
    assert waited < 15, waited
    done = upkeep(url)  # the reader is gone
    assert len(done["created"]) == 8, done


def test_a_second_caller_is_told_busy_while_one_keeps_up(partitioned: str) -> None:
    url = partitioned
    with psycopg.connect(url, row_factory=dict_row) as first:
        assert "created" in partition_store.upkeep(first)  # its transaction still open
        assert upkeep(url) == {"busy": True}
    assert upkeep(url)["created"] == []  # the first committed its partitions


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("history-partition-interval", "30s"),
        ("history-partition-interval", "90s"),
        ("history-partition-interval", "32d"),
        ("history-partition-interval", "1m"),  # with the retention below: 1,440 partitions
        ("history-retention", "1001d"),  # with the default interval, 1 day
    ],
)
def test_an_interval_or_retention_that_cannot_work_is_refused_with_exit_2_and_nothing_written(
    cli: Any, database_url: str, name: str, value: str
) -> None:
    assert cli("config", "set", "history-retention", "1d").code == 0
    before = query(database_url, "SELECT key, value FROM fleet_setting ORDER BY key")
    refused = cli("config", "set", name, value)
    assert refused.code == 2, refused.out
    assert len(refused.err.strip().splitlines()) == 1, refused.err
    assert query(database_url, "SELECT key, value FROM fleet_setting ORDER BY key") == before
    assert cli("config", "set", "history-retention", "1000d").code == 0  # exactly 1,000
    assert cli("config", "set", "history-partition-interval", "31d").code == 0


def test_the_reader_reads_history_through_the_parent_only(partitioned: str) -> None:
    from tests.role_fleet import role_fleet

    url = partitioned
    with role_fleet(url, grant=False) as fleet:
        with psycopg.connect(url, autocommit=True) as conn:  # `db roles`' grants, as it makes them
            roles.apply(conn, roles.grants(fleet.names))
        with psycopg.connect(fleet.daemon, row_factory=dict_row) as conn:
            done = partition_store.upkeep(conn)  # as the daemon role: it may execute it
        assert done["created"], done
        (partition,) = [p["partition"] for p in dated(url)][:1]
        with psycopg.connect(fleet.reader) as conn:
            conn.execute("SELECT id, status FROM occurrence").fetchall()
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(f"SELECT id FROM {partition}")
            conn.rollback()
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT args FROM occurrence")  # the secret column (ADR 0031)
        with psycopg.connect(fleet.daemon) as conn, pytest.raises(psycopg.errors.Error):
            conn.execute(f"DROP TABLE {partition}")  # the daemon role owns nothing


def test_migrate_ends_with_one_upkeep(empty_database_url: str, cli: Any) -> None:
    url = empty_database_url
    migrated = cli("migrate", "--json", url=url)
    assert migrated.code == 0, migrated.err
    done = migrated.json()["partitions"]
    if done.get("partitioned") is False:
        pytest.skip("the baseline does not partition the history yet (branch wt-model)")
    assert done["partitions_ahead"] >= 4, done
    assert dated(url)


@pytest.mark.slow
def test_a_daemon_whose_upkeep_fails_counts_it_logs_it_and_runs_its_tasks(
    database_url: str, cli: Any, spawn: Any
) -> None:
    """EXECUTE revoked from the daemon role: every upkeep call fails (permission denied); the
    daemon counts it, logs it, and its reconcile step and hot path go on."""
    from tests.role_fleet import role_fleet

    with role_fleet(database_url) as fleet:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(
                psycopg.sql.SQL(
                    "REVOKE EXECUTE ON FUNCTION sd_partitions_v1(interval, interval, interval) "
                    "FROM {}"
                ).format(psycopg.sql.Identifier(fleet.names.daemon))
            )
        port = free_port()
        daemon = spawn(fleet.daemon, "no-upkeep", "--http-port", str(port))
        daemon.instance_id()
        for step in (
            ("tasks", "add", "tick", "--every", "1h", "--command", "true"),
            ("tasks", "trigger", "tick"),
        ):
            assert cli(*step, url=fleet.operator).code == 0
        wait_for(
            lambda: query(database_url, "SELECT 1 FROM run WHERE status = 'success'"),
            message="the triggered job to succeed while the upkeep fails",
        )
        wait_for(lambda: '"partition_upkeep_failed"' in daemon.log(), message="the failure")
        (line,) = [x for x in daemon.log().splitlines() if '"partition_upkeep_failed"' in x]
        assert "permission denied for function sd_partitions_v1" in line
        metrics = http_get(port, "/metrics")[1]
        assert 'scheduler_daemon_side_failures_total{part="partitions"} 1.0' in metrics
        assert daemon.proc.poll() is None, daemon.log()
        assert daemon.stop() == 0, daemon.log()


def test_audit_owes_nothing_after_a_drop_and_would_without_its_marks(
    partitioned: str, cli: Any, client: Any
) -> None:
    """A task firing every 10 minutes for three hours, each firing recorded; the partitions
    past a one-hour retention dropped: `audit` is clean, and stays clean when the retention is
    lengthened to 30 days, because the drop raised the task's `task_pruned` mark. With the mark
    removed the dropped firings are owed: the check has teeth (a drop that raised no mark fails
    this test)."""
    from tests.integration.test_audit_pruned import _history, _task

    url = partitioned
    setting(url, "history_partition_interval", "1h")
    task = _task(client, url, "every10")
    recorded = _history(url, task.id)
    made = upkeep(url)
    assert made["moved_rows"] == len(recorded), made
    assert cli("config", "set", "history-retention", "1h").code == 0
    done = upkeep(url)
    assert done["dropped"], done
    assert done["dropped_rows"] > 0, done
    audited = cli("audit", "--json")
    assert audited.code == 0, audited.out
    assert audited.json()["violations"] == []
    # A longer retention later owes the dropped firings again, but for the mark.
    assert cli("config", "set", "history-retention", "30d").code == 0
    audited = cli("audit", "--json")
    assert audited.code == 0, audited.out
    query(url, "DELETE FROM task_pruned RETURNING task_id")
    owed = cli("audit", "--json", "--check", "firing_missing")
    assert owed.code == 1, owed.out
    assert owed.json()["violations"][0]["check"] == "firing_missing"


def test_the_row_by_row_prune_leaves_what_a_drop_removes_and_takes_what_it_cannot(
    partitioned: str, cli: Any, pool: Any
) -> None:
    """On partitioned history the prune takes the fleet's retention one interval later (what
    the next drop removes whole is not deleted row by row first), and a task's shorter
    retention as it is. Fails on a prune that deletes every row past the fleet's retention."""
    from scheduler_daemon.services.pruner import Pruner

    url = partitioned
    setting(url, "history_partition_interval", "1h")
    plain = add_task(cli, "plain")
    short = add_task(cli, "short", "--history-retention", "30m")
    recent = [plant(url, plain, s, timedelta(minutes=m)) for s, m in ((2, 90), (3, 80))]
    stale = plant(url, plain, 1, timedelta(minutes=150))  # past retention + interval
    shorts = [plant(url, short, s, timedelta(minutes=m)) for s, m in ((1, 90), (2, 80))]
    upkeep(url)
    setting(url, "history_retention", "1h")
    Pruner(pool, instance_id="t").run_once(until_swept=True)
    left = set(where(url, "occurrence", [*recent, stale, *shorts]))
    assert left == {*recent, shorts[-1]}  # short keeps only its newest outcome


@pytest.mark.slow
def test_a_daemons_history_is_audited_clean_after_its_minute_partitions_are_dropped(
    database_url: str, cli: Any, spawn: Any
) -> None:
    """A real daemon runs every-second tasks over one-minute partitions for a little over a
    minute; the upkeep then drops the first minutes (retention 1s) while the daemon runs; with
    the retention lengthened again, `audit` owes nothing: the drop raised each task's mark and
    kept each task's newest outcome."""
    url = database_url
    assert cli("config", "set", "history-partition-interval", "1m").code == 0
    first = cli("partitions", "--upkeep", "--json")
    assert first.code == 0, first.err
    assert first.json()["partitions_ahead"] >= 60  # an hour ahead, at one minute each
    for name, extra in (("tick", ()), ("queued", ("--overlap", "queue"))):
        assert cli("tasks", "add", name, "--every", "1s", "--command", "true", *extra).code == 0
    daemon = spawn(url, "partitioned", "--concurrency", "4")
    daemon.instance_id()
    began = query(url, "SELECT now() AS t")[0]["t"]
    wait_for(
        lambda: query(url, "SELECT now() - %s > interval '75 seconds' AS ok", (began,))[0]["ok"],
        timeout=120,
        message="the first minute partition to be past",
    )
    assert cli("config", "set", "history-retention", "1s").code == 0
    dropped = cli("partitions", "--upkeep", "--json")
    assert dropped.code == 0, dropped.err
    assert dropped.json()["dropped"], dropped.out
    assert dropped.json()["dropped_rows"] > 0, dropped.out
    wait_for(
        lambda: query(
            url,
            "SELECT count(*) >= 4 AS ok FROM run WHERE finished_at > now() - interval '2 seconds'",
        )[0]["ok"],
        message="the daemon to go on running after the drop",
    )
    assert daemon.stop() == 0, daemon.log()
    assert cli("config", "set", "history-retention", "1h").code == 0
    audited = cli("audit", "--json", "--settle", "2s")
    assert audited.code == 0, audited.out
    assert audited.json()["violations"] == []
    newest = query(
        url, "SELECT count(DISTINCT task_id) AS n FROM occurrence WHERE status = 'success'"
    )
    assert newest[0]["n"] == 2


def test_a_large_fallen_backlog_moves_out_over_several_calls(partitioned: str, cli: Any) -> None:
    """Rows of 30 past hours in the DEFAULT partition (a long outage, or history carried from
    0037): one call makes the partitions ahead and the 24 oldest past ones, says `backlog`, and
    the next call makes the rest: no call does an unbounded move."""
    url = partitioned
    setting(url, "history_partition_interval", "1h")
    task = add_task(cli, "backlog")
    planted = [plant(url, task, h, timedelta(hours=h, minutes=30)) for h in range(1, 31)]
    first = upkeep(url)
    assert first["backlog"] is True, first
    assert first["moved_rows"] == 2 * 24, first  # occurrences and runs of the 24 oldest hours
    left = [i for i, p in where(url, "occurrence", planted).items() if p == "occurrence_active"]
    assert sorted(left) == sorted(planted[:6])  # the 6 newest hours (1..6 hours ago) wait
    second = upkeep(url)
    assert second["backlog"] is False, second
    assert "occurrence_active" not in where(url, "occurrence", planted).values()


def test_status_warns_when_fewer_than_two_partitions_remain_ahead(
    partitioned: str, cli: Any
) -> None:
    url = partitioned
    assert cli("status", "--json").json()["warnings"] == []  # no upkeep recorded yet
    setting(url, "history_partition_interval", "1h")
    upkeep(url)
    assert cli("status", "--json").json()["warnings"] == []
    for p in dated(url)[1:]:  # as if the upkeep had stalled for three hours
        query(url, f"ALTER TABLE occurrence DETACH PARTITION {p['partition']}")
    status = cli("status", "--json").json()
    assert status["partitions"]["partitions_ahead"] == 1
    assert status["warnings"] == ["only 1 history partition(s) ahead: see partition upkeep"]
    assert "warning: only 1 history partition(s) ahead" in cli("status").out
