"""History retention against a real database: the fleet setting and the task override, a prune
that keeps each task's latest outcome and removes everything of a deleted task, bounded passes
over a large planted history with the hot plans unchanged, `prune --dry-run`, and `audit`
checking only the window the retention keeps."""

import re
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.services.pruner import Pruner
from scheduler_daemon.storage import query as queries
from tests.support import nested_plans, query, shell_task

DAY = timedelta(days=1)


def _now(url: str) -> datetime:
    return query(url, "SELECT now() AS t")[0]["t"]


def _history(
    url: str, task_id: int, ages: list[timedelta], *, status: str = "success"
) -> list[int]:
    """Finished occurrences, each with one run, `age` ago; the last one shown as the task's
    latest outcome, as the completer records it."""
    now = _now(url)
    ids = []
    for seq, age in enumerate(ages, start=1):
        (row,) = query(
            url,
            """
            INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap,
                status, not_before, created_at, finished_at, attempts, lease_token)
            VALUES (%s, %s, %s, 'schedule', 'allow', %s, %s, %s, %s, 1, 1) RETURNING id
            """,
            (task_id, seq, now - age, status, now - age, now - age, now - age),
        )
        query(
            url,
            "INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at, "
            "takeover_at, status, started_at, finished_at, build_revision) "
            "VALUES (%s, 1, 'x', 1, %s, %s, %s, %s, %s, 'b')",
            (row["id"], now - age, now - age, status, now - age, now - age),
        )
        ids.append(row["id"])
    query(
        url,
        "UPDATE task SET occurrence_seq = %s, last_outcome_seq = %s, last_occurrence_id = %s, "
        "last_status = %s WHERE id = %s",
        (len(ages), len(ages), ids[-1], status, task_id),
    )
    return ids


def _ids(url: str, task_id: int) -> list[int]:
    rows = query(url, "SELECT id FROM occurrence WHERE task_id = %s ORDER BY id", (task_id,))
    return [r["id"] for r in rows]


def test_the_fleet_setting_and_the_task_override_take_durations(cli, client) -> None:
    assert cli("config", "set", "history-retention", "30d").code == 0
    shown = cli("config", "show", "--json")
    assert shown.json()["history-retention"] == "30d"
    bad = cli("config", "set", "history-retention", "soon")
    assert bad.code == 2
    assert bad.err.count("\n") == 1
    added = cli(
        "tasks",
        "add",
        "t",
        "--every",
        "1h",
        "--command",
        "true",
        "--history-retention",
        "7d",
        "--json",
    )
    assert added.code == 0, added.err
    assert added.json()["history_retention_seconds"] == 7 * 86400
    cleared = cli("tasks", "update", "t", "--history-retention", "none", "--json")
    assert cleared.json()["history_retention_seconds"] is None
    assert cli("config", "set", "history-retention", "none").code == 0


def test_a_prune_keeps_the_latest_outcome_and_takes_all_of_a_deleted_task(
    cli, client, pool, database_url
) -> None:
    kept = shell_task(client, name="kept")
    old = _history(database_url, kept.id, [50 * DAY, 45 * DAY, 40 * DAY])  # all past 30 days
    short = shell_task(client, name="short", history_retention=2 * DAY)
    short_ids = _history(database_url, short.id, [5 * DAY, 3 * DAY, DAY, timedelta(hours=1)])
    long = shell_task(client, name="long", history_retention=90 * DAY)
    long_ids = _history(database_url, long.id, [60 * DAY, 50 * DAY])
    gone = shell_task(client, name="gone")
    _history(database_url, gone.id, [40 * DAY, 35 * DAY])
    client.delete(gone.id, requested_by="test")

    nothing = Pruner(pool, instance_id="t").run_once()
    assert nothing.occurrences == 2  # no fleet retention yet: only the task override applies
    assert _ids(database_url, short.id) == short_ids[2:]
    cli("config", "set", "history-retention", "30d")
    dry = cli("prune", "--dry-run", "--json")
    assert dry.json()["occurrences"] == 4
    assert _ids(database_url, kept.id) == old  # a dry run deletes nothing
    done = cli("prune", "--json")
    assert done.code == 0, done.err
    assert done.json() | {"batches": 0} == {
        "dry_run": False,
        "history_retention": "30d",
        "occurrences": 4,
        "runs": 4,
        "batches": 0,
    }
    assert _ids(database_url, kept.id) == old[-1:]  # its latest outcome stays
    assert _ids(database_url, long.id) == long_ids  # its own retention is longer
    assert _ids(database_url, gone.id) == []  # a deleted task keeps nothing
    assert (
        query(
            database_url,
            "SELECT count(*) AS n FROM run r LEFT JOIN occurrence o "
            "ON o.id = r.occurrence_id WHERE o.id IS NULL",
        )[0]["n"]
        == 0
    )
    shown = cli("tasks", "show", "kept", "--json").json()
    assert shown["last_status"] == "success"
    assert cli("prune", "--json").json()["occurrences"] == 0  # a second prune finds nothing


def test_a_prune_keeps_the_newest_outcome_its_occurrences_name_not_the_stale_task_row(
    cli, client, database_url
) -> None:
    """Fails on a keep rule that keys on `task.last_outcome_seq`: a recurring task's successes
    no longer write it (revision 0021), so it still names the first outcome and that rule
    deletes nothing; the rule that reads the occurrences keeps only the newest outcome and the
    `skipped` firing after it."""
    task = shell_task(client, name="stale")
    ids = _history(database_url, task.id, [50 * DAY, 45 * DAY, 40 * DAY])
    now = _now(database_url)
    (skipped,) = query(
        database_url,
        """
        INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap,
            status, reason, not_before, created_at, finished_at)
        VALUES (%s, 4, %s, 'schedule', 'allow', 'skipped', 'overlap', %s, %s, %s) RETURNING id
        """,
        (task.id, now - 35 * DAY, now, now - 35 * DAY, now - 35 * DAY),
    )
    query(
        database_url,
        "UPDATE task SET occurrence_seq = 4, last_outcome_seq = 1, last_occurrence_id = %s "
        "WHERE id = %s RETURNING id",
        (ids[0], task.id),
    )
    cli("config", "set", "history-retention", "30d")
    assert cli("prune", "--json").json()["occurrences"] == 2
    assert _ids(database_url, task.id) == [ids[-1], skipped["id"]]
    assert cli("tasks", "show", "stale", "--json").json()["last_outcome_seq"] == 3


def test_a_one_shot_keeps_the_occurrence_its_status_follows(cli, client, database_url) -> None:
    at = _now(database_url) + timedelta(hours=1)
    task = client.add_task(TaskSpec(name="once", executor="shell", target="true", at=at))
    _history(database_url, task.id, [40 * DAY, 39 * DAY])
    query(
        database_url,
        "UPDATE task SET status = 'completed', next_run_at = NULL WHERE id = %s",
        (task.id,),
    )
    cli("config", "set", "history-retention", "1d")
    assert cli("prune").code == 0
    assert len(_ids(database_url, task.id)) == 1
    assert cli("audit", "--check", "one_shot_status").code == 0


def _shape(url: str, name: str, params: dict[str, Any]) -> str:
    seqscan_off = "SET enable_seqscan = off"  # what matters is that an index can serve it
    statement = queries.QUERIES[name].sql.rsplit(";\n", 1)[-1]
    if "FROM sd_" in statement:  # a function's statements (the claim): as it plans them
        return nested_plans(url, statement, params, seqscan_off)
    with psycopg.connect(url) as conn:
        conn.execute(seqscan_off)
        rows = conn.execute(f"EXPLAIN (COSTS OFF) {statement}", params).fetchall()
        conn.rollback()
    return "\n".join(r[0] for r in rows)


def _counts(url: str) -> dict[str, int]:
    return {t: query(url, f"SELECT count(*) AS n FROM {t}")[0]["n"] for t in ("occurrence", "run")}


def _indexes(plan: str) -> set[str]:
    return set(re.findall(r"using (\w+)", plan))


HOT = {
    "occurrence_claim_launch": {
        "key": 1,
        "slots": 10,
        "owner": "o",
        "ttl": timedelta(seconds=5),
        "grace": timedelta(seconds=1),
        "build_revision": "x",
        "known": ["0038"],
        "now": None,
    },
    "task_claim_due": {"limit": 10, "now": None, "known": ["0038"]},
}
# The indexes each hot statement may use: partial indexes over the active rows (and primary keys
# for the rows they found), never one that grows with the finished history.
SERVED_BY = {
    "occurrence_claim_launch": {
        "occurrence_queue_idx",
        "occurrence_queue_marked_idx",  # the marked lane: empty here (ADR 0029)
        "occurrence_executing_idx",
        "fleet_setting_pkey",
        "occurrence_task_active_idx",
        "occurrence_key_active_idx",
        "occurrence_id_key",
        "occurrence_active_id_idx",  # the same ids on the default partition (issue 47)
        "task_pkey",
        "fleet_epoch_pkey",  # the newest timeline and the last failover (revision 0019)
    },
    # Each due task's calendar ids (revision 0036): a probe of task_calendar's key.
    "task_claim_due": {"task_due_idx", "task_due_marked_idx", "task_calendar_pkey"},
}
RETENTION_INDEXES = ("occurrence_finished_idx", "task_retention_idx", "task_deleted_idx")
# The partition's copy of occurrence_finished_idx, which the plans name (issue 47).
RETENTION_SCANS = {*RETENTION_INDEXES, "occurrence_active_finished_idx"}


def _assert_hot_plans_stay_on_the_active_rows(url: str) -> None:
    """The claim and the due scan plan the same way whatever the history: on the partial indexes
    of the active rows (the planner may pick either of the two the claim can use, by its sample),
    with the retention's indexes present or not, before and after a prune."""
    for name, params in HOT.items():
        plan = _shape(url, name, params)
        used = _indexes(plan)
        assert used, plan
        assert used <= SERVED_BY[name], plan
        assert not used & RETENTION_SCANS, plan


PLANTED = 200_000


def test_a_pass_over_a_large_history_is_bounded_and_leaves_the_hot_plans_alone(
    pool, database_url
) -> None:
    query(
        database_url,
        """
        INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload, overlap,
                          next_run_at, occurrence_seq, last_outcome_seq)
        SELECT 't' || g, 'interval', '1 second', now(), 'shell', '{"command": "true"}', 'allow',
               now() + g * interval '1 second', %(n)s, %(n)s FROM generate_series(1, 20) g
        """,
        {"n": PLANTED},
    )
    query(  # a week-plus of per-second history over 20 tasks, 1 in 1000 still queued
        database_url,
        """
        INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, status,
                                not_before, finished_at, attempts, lease_token)
        SELECT t.id, g, now() - (%(n)s - g) * interval '4 second', 'schedule', 'allow',
               CASE WHEN g %% 1000 = 0 THEN 'queued' ELSE 'success' END, now(),
               CASE WHEN g %% 1000 = 0 THEN NULL
                    ELSE now() - (%(n)s - g) * interval '4 second' END, 1, 1
        FROM generate_series(1, %(n)s) g
        JOIN task t ON t.name = 't' || (1 + g %% 20)
        """,
        {"n": PLANTED},
    )
    query(
        database_url,
        "INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at, "
        "takeover_at, status, started_at, finished_at, build_revision) "
        "SELECT id, 1, 'x', 1, finished_at, finished_at, 'success', finished_at, finished_at, 'b' "
        "FROM occurrence WHERE status = 'success' AND id % 10 = 0",  # a run for one in ten
    )
    query(database_url, "ANALYZE")
    _assert_hot_plans_stay_on_the_active_rows(database_url)
    prune_plan = _shape(
        database_url,
        "retention_prune",
        {
            "retention": DAY,
            "min_retention": DAY,
            "after_at": datetime(1, 1, 1),
            "after_id": 0,
            "scan": 2000,
            "limit": 500,
            "now": None,
            "task_id": None,
        },
    )
    assert "occurrence_active_finished_idx" in prune_plan, prune_plan  # index-driven, oldest first

    query(
        database_url,
        "INSERT INTO fleet_setting (key, value) VALUES ('history_retention', '\"1d\"')",
    )
    pruner = Pruner(pool, instance_id="t", batch=500, batches=4)
    before = _counts(database_url)
    first = pruner.run_once()
    assert (first.batches, first.occurrences) == (4, 2000)  # the bound, reached
    second = pruner.run_once()
    assert second.occurrences == 2000
    after = _counts(database_url)
    assert before["occurrence"] - after["occurrence"] == 4000
    assert before["run"] - after["run"] == first.runs + second.runs > 0
    orphans = "SELECT count(*) AS n FROM run r LEFT JOIN occurrence o ON o.id = r.occurrence_id "
    assert query(database_url, orphans + "WHERE o.id IS NULL")[0]["n"] == 0
    # The oldest go first: nothing younger than what was deleted was touched.
    oldest_left = query(database_url, "SELECT min(finished_at) AS t FROM occurrence")[0]["t"]
    assert oldest_left >= _now(database_url) - timedelta(seconds=4 * PLANTED) + 3900 * timedelta(
        seconds=4
    )

    query(database_url, "ANALYZE")
    _assert_hot_plans_stay_on_the_active_rows(database_url)
    for index in RETENTION_INDEXES:
        query(database_url, f"DROP INDEX {index}")
    query(database_url, "ANALYZE")
    _assert_hot_plans_stay_on_the_active_rows(database_url)


@pytest.mark.parametrize("retention", [None, "1h"])
def test_audit_checks_only_the_window_the_retention_keeps(
    cli, client, database_url, retention
) -> None:
    task = client.add_task(
        TaskSpec(name="tenmin", executor="shell", target="true", every=timedelta(minutes=10))
    )
    query(
        database_url,
        "UPDATE task_event SET at = at - interval '3 hours', "
        "anchor_at = anchor_at - interval '3 hours' WHERE task_id = %s",
        (task.id,),
    )
    (event,) = query(database_url, "SELECT * FROM task_event WHERE task_id = %s", (task.id,))
    now = _now(database_url)
    firing = event["anchor_at"]
    seq = 0
    while firing < now:  # rows only for the last 70 minutes: the older ones were pruned
        if firing > now - timedelta(minutes=70):
            seq += 1
            query(
                database_url,
                "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, "
                "trigger, overlap, status, not_before, finished_at) VALUES (%s, %s, %s, "
                "'schedule', 'forbid', 'success', %s, %s)",
                (task.id, seq, firing, firing, firing),
            )
        firing += timedelta(minutes=10)
    query(
        database_url,
        "UPDATE task SET occurrence_seq = %s, next_run_at = %s WHERE id = %s",
        (seq, firing, task.id),
    )
    if retention:
        cli("config", "set", "history-retention", retention)
    result = cli("audit", "--json", "--check", "firing_missing")
    assert result.code == (0 if retention else 1), result.out
