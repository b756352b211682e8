"""`--spread` against a real database (issue 37 item 1): the dispatcher records each firing at its
nominal time with the offset domain/spread.py draws, no claim starts it before its spread start,
its start lag counts from there, and `--start-deadline` too; the field round-trips through the CLI
and is refused past half the shortest gap."""

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from scheduler_daemon.domain.spread import spread_offset
from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.storage import migration, occurrence_store
from scheduler_daemon.storage.database import transaction
from tests.support import Replica, query

KNOWN = migration.known_revisions()

SPREAD = timedelta(minutes=30)


def _hourly(client: Any, now: datetime | None, **kw: Any) -> Any:
    spec = TaskSpec(name="spread", executor="shell", target="true", every=timedelta(hours=1), **kw)
    return client.add_task(spec, now=now)


def test_a_spread_firing_is_recorded_at_its_nominal_time_and_starts_at_its_offset(
    client, pool, executors, database_url
) -> None:
    (db_now,) = query(database_url, "SELECT now() AS t")
    created = db_now["t"] - timedelta(hours=2)
    task = _hourly(client, created, spread=SPREAD)
    nominal = created + timedelta(hours=1)
    offset = spread_offset(task.id, nominal, SPREAD)
    assert timedelta(seconds=1) < offset < SPREAD  # this id and instant's draw (a fixed hash)
    replica = Replica(database_url, pool, executors, "a")

    result = replica.dispatcher.run_once(now=nominal)
    assert (result.queued, result.ready, result.spread_starts) == (1, 0, [nominal + offset])
    (occ,) = query(database_url, "SELECT scheduled_for, not_before, spread_offset FROM occurrence")
    assert occ == {
        "scheduled_for": nominal,
        "not_before": nominal + offset,
        "spread_offset": offset,
    }
    # Not before its spread start; at it, with a start lag counted from it (0: the clock pinned).
    assert replica.launcher.run_once(now=nominal + offset - timedelta(seconds=1)).claimed == 0
    launched = replica.launcher.run_once(now=nominal + offset)
    assert launched.claimed == 1
    assert [s.start_lag_seconds for s in launched.started] == [0.0]


def test_without_a_spread_a_firing_is_ready_at_its_nominal_time(
    client, pool, executors, database_url
) -> None:
    (db_now,) = query(database_url, "SELECT now() AS t")
    created = db_now["t"] - timedelta(hours=2)
    _hourly(client, created)
    replica = Replica(database_url, pool, executors, "a")
    result = replica.dispatcher.run_once(now=created + timedelta(hours=1))
    assert (result.queued, result.ready, result.spread_starts) == (1, 1, [])
    (occ,) = query(database_url, "SELECT scheduled_for, not_before, spread_offset FROM occurrence")
    assert occ["not_before"] == occ["scheduled_for"]
    assert occ["spread_offset"] is None


def test_the_start_deadline_counts_from_the_spread_start(client, pool, database_url) -> None:
    # Nominal 2 min ago, start deadline 1 min: past it by the nominal time, not by the spread
    # start 10 min later. Fails against the deadline counted from scheduled_for alone.
    task = _hourly(client, None, start_deadline=timedelta(minutes=1))
    occ = client.trigger(task.id, requested_by="test")
    query(
        database_url,
        "UPDATE occurrence SET trigger = 'schedule', scheduled_for = now() - interval '2 min', "
        "spread_offset = interval '10 min', not_before = now() + interval '8 min' RETURNING id",
    )
    with transaction(pool) as tx:
        assert occurrence_store.past_deadline(tx.conn, after=0, limit=10, known=KNOWN) == []
    query(database_url, "UPDATE occurrence SET spread_offset = interval '30 s' RETURNING id")
    with transaction(pool) as tx:
        late = occurrence_store.past_deadline(tx.conn, after=0, limit=10, known=KNOWN)
        assert [o.id for o in late] == [occ.id]


def test_spread_round_trips_through_add_update_export_apply_json_and_next(
    cli, db, tmp_path: Path
) -> None:
    added = cli("tasks", "add", "t", "--cron", "0 * * * *", "--spread", "5m", "--command", "true")
    assert added.code == 0, added.err
    assert cli("tasks", "show", "t", "--json").json()["spread_seconds"] == 300
    exported = cli("tasks", "export").out
    assert 'spread = "5m"' in exported
    rows = cli("tasks", "next", "t", "-n", "3", "--json").json()
    (task,) = db.execute("SELECT id FROM task").fetchall()
    for row in rows:
        nominal = datetime.fromisoformat(row["utc"])
        offset = spread_offset(task["id"], nominal, timedelta(minutes=5))
        assert datetime.fromisoformat(row["start_utc"]) == nominal + offset
    assert "START_UTC" in cli("tasks", "next", "t").out
    assert cli("tasks", "update", "t", "--spread", "10m").code == 0
    assert cli("tasks", "show", "t", "--json").json()["spread_seconds"] == 600
    cli("tasks", "delete", "t")
    path = tmp_path / "tasks.toml"
    path.write_text(exported)
    assert cli("tasks", "apply", "-f", str(path), "--source", "s").code == 0
    (row,) = db.execute("SELECT spread FROM task WHERE deleted_at IS NULL").fetchall()
    assert row["spread"] == timedelta(minutes=5)
    assert cli("tasks", "update", "t", "--spread", "none").code == 0
    assert "START_UTC" not in cli("tasks", "next", "t").out


def test_a_spread_past_half_the_shortest_gap_is_one_line_exit_2_and_writes_nothing(
    cli, counts, db, tmp_path: Path
) -> None:
    before = counts()
    result = cli("tasks", "add", "t", "--cron", "0 9,10 * * *", "--spread", "31m", "--command", "x")
    assert (result.code, result.out) == (2, "")
    assert result.err == (
        "error: --spread 31m is more than half the shortest gap between firings (1h among the "
        "next 1000); at most 30m\n"
    )
    path = tmp_path / "tasks.toml"
    path.write_text('[u]\ncommand = "true"\nevery = "10m"\nspread = "6m"\n')
    applied = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert applied.code == 2
    assert "at most 5m" in applied.err
    assert counts() == before
    assert cli("tasks", "add", "t", "--every", "10m", "--command", "x", "--spread", "5m").code == 0
    updated = cli("tasks", "update", "t", "--every", "5m")  # the gap shrinks under the spread
    assert (updated.code, updated.err.count("\n")) == (2, 1)
    assert "at most 2m30s" in updated.err
    (row,) = db.execute("SELECT every FROM task").fetchall()
    assert row["every"] == timedelta(minutes=10)
