"""What a claim hands a job never repeats across a failover that lost commits (issue 32 item 2,
revision 0019), and exclusive work waits out every lost claim's trust deadline (item 1).

On the real database, with the fleet's epoch sightings written as a promotion leaves them (the
first epoch recorded, then the promoted timeline's first sighting). Each would fail on 2a764ea
(before revision 0019): the token after a promotion was the occurrence's token + 1 (1 for a
firing a lost branch ran with token 1), the key was `scheduler-daemon-occurrence-{id}` (an id a
lost commit hands out again), and a `forbid` occurrence was claimed at once after a promotion.
"""

import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.storage import migration
from tests.support import Replica, query, shell_task

TTL, GRACE = timedelta(seconds=9), timedelta(seconds=3)
TIMELINE_2 = 2**32  # (2 - 1) * 2^32: every token on timeline 2 is above it
KEY = re.compile(
    r"scheduler-daemon:(?P<task>[0-9a-f-]{36}):(?P<trigger>schedule|backfill):(?P<at>[0-9T:.Z-]+)"
)


def _claim(url: str, *, now: datetime | None = None, ttl: timedelta = TTL) -> list[dict[str, Any]]:
    """One claim as this build sends it (sd_claim_launch_v6), the clock pinned to `now`."""
    rows = query(
        url,
        "SELECT * FROM sd_claim_launch_v6(1, 100, 'o', %s, %s, 'x', '{}', %s)",
        (ttl, GRACE, now),
    )
    return [r for r in rows if r["id"] is not None]


def _promoted(url: str) -> datetime:
    """Epoch sightings as after a promotion: timeline 1 recorded a day ago, timeline 2 first
    seen now (the database's clock). Returns that sighting."""
    query(url, "INSERT INTO fleet_epoch VALUES (1, 1, now() - interval '1 day'), (1, 2, now())")
    (row,) = query(url, "SELECT first_seen_at FROM fleet_epoch WHERE timeline = 2")
    return row["first_seen_at"]


def _fail_back(url: str, occurrence_id: int) -> None:
    """The occurrence's attempt ends and it is queued again (as a takeover or retry leaves it)."""
    query(url, "UPDATE run SET status = 'failed', finished_at = now() WHERE occurrence_id = %s",
          (occurrence_id,))  # fmt: skip
    query(url, "UPDATE occurrence SET status = 'queued', claim_owner = NULL WHERE id = %s",
          (occurrence_id,))  # fmt: skip


def test_a_fleet_that_never_failed_over_keeps_its_tokens(client, database_url) -> None:
    task = shell_task(client, overlap="allow")
    occurrence = client.trigger(task.id, requested_by="test")
    query(database_url, "INSERT INTO fleet_epoch VALUES (1, 1, now())")
    (first,) = _claim(database_url)
    _fail_back(database_url, occurrence.id)
    (second,) = _claim(database_url)
    assert (first["lease_token"], second["lease_token"]) == (1, 2)


def test_every_token_after_a_promotion_is_above_every_token_of_the_lost_branch(
    client, database_url
) -> None:
    # The lost branch ran this firing with token 1 (its claim never reached the standby): the
    # new primary's claim of it must hand out more than any token timeline 1 ever gave.
    task = shell_task(client, overlap="allow")
    occurrence = client.trigger(task.id, requested_by="test")
    _promoted(database_url)
    (claimed,) = _claim(database_url)
    assert claimed["lease_token"] == TIMELINE_2 + 1
    _fail_back(database_url, occurrence.id)
    (again,) = _claim(database_url)
    assert again["lease_token"] == TIMELINE_2 + 2  # and on from there, one by one


def test_exclusive_work_waits_out_the_longest_lease_after_a_promotion_and_the_rest_does_not(
    client, database_url
) -> None:
    forbid = client.trigger(shell_task(client, "f", overlap="forbid").id, requested_by="t")
    queue = client.trigger(shell_task(client, "q", overlap="queue").id, requested_by="t")
    keyed = client.trigger(
        shell_task(client, "k", overlap="allow", concurrency_key="k").id, requested_by="t"
    )
    free = client.trigger(shell_task(client, "a", overlap="allow").id, requested_by="t")
    # A registered instance with a longer lease than this claim's: the wait is its lease.
    query(
        database_url,
        "INSERT INTO instance (id, hostname, pid, version, schema_revision, concurrency,"
        " lease_ttl, lease_grace, reconcile_interval)"
        " VALUES ('slow', 'h', 1, 'v', %s, 1, '30 s', '10 s', '3 s')",
        (migration.head_revision(),),
    )
    seen = _promoted(database_url)
    at_once = _claim(database_url, now=seen + timedelta(seconds=1))
    assert [r["id"] for r in at_once] == [free.id]  # non-exclusive work resumes at once
    # Past this claim's own TTL + grace, not yet past the slow instance's 40 s: still waiting.
    assert _claim(database_url, now=seen + TTL + GRACE + timedelta(seconds=1)) == []
    later = _claim(database_url, now=seen + timedelta(seconds=40))
    assert sorted(r["id"] for r in later) == sorted([forbid.id, queue.id, keyed.id])


def test_the_first_epoch_a_fleet_records_is_no_failover_and_delays_nothing(
    client, database_url
) -> None:
    forbid = client.trigger(shell_task(client, overlap="forbid").id, requested_by="t")
    query(database_url, "INSERT INTO fleet_epoch VALUES (1, 1, now())")
    assert [r["id"] for r in _claim(database_url)] == [forbid.id]


def test_a_scheduled_firing_s_key_names_its_task_trigger_and_time_and_never_changes(
    client, database_url
) -> None:
    at = datetime(2026, 12, 6, 21, 0, tzinfo=UTC)
    task = client.add_task(
        TaskSpec(name="c", executor="shell", target="true", cron="0 * * * *", overlap="allow")
    )
    (task_uuid,) = query(database_url, "SELECT uuid FROM task WHERE id = %s", (task.id,))
    # As if the dispatcher had moved on: the backfilled firing is no longer owed to it.
    query(database_url, "UPDATE task SET next_run_at = now() + interval '1 day'")
    done = client.backfill(task.id, start=at, end=at, requested_by="test")
    assert len(done.occurrence_ids) == 1
    (claimed,) = _claim(database_url)
    match = KEY.fullmatch(claimed["idempotency_key"])
    assert match is not None, claimed["idempotency_key"]
    assert match.groupdict() == {
        "task": str(task_uuid["uuid"]),
        "trigger": "backfill",
        "at": "2026-12-06T21:00:00Z",
    }
    _fail_back(database_url, claimed["id"])
    (again,) = _claim(database_url)
    assert again["idempotency_key"] == claimed["idempotency_key"]  # every attempt, one key
    assert again["run_uuid"] != claimed["run_uuid"]  # a run's own, never shared


def test_the_dispatcher_stores_the_scheduled_key(client, pool, executors, database_url) -> None:
    client.add_task(
        TaskSpec(
            name="s", executor="shell", target="true", every=timedelta(minutes=1), overlap="allow"
        )
    )
    replica = Replica(database_url, pool, executors, "d")
    assert replica.dispatcher.run_once(now=datetime.now(UTC) + timedelta(minutes=2)).queued
    rows = query(database_url, "SELECT scheduled_for, idempotency_key FROM occurrence")
    assert rows
    for row in rows:
        match = KEY.fullmatch(row["idempotency_key"])
        assert match is not None, row
        assert match["trigger"] == "schedule", row
        stamp = row["scheduled_for"].astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
        assert match["at"] in (f"{stamp}Z", f"{stamp}.{row['scheduled_for'].microsecond:06d}Z")


def test_manual_firings_get_random_keys_and_a_stored_null_keeps_the_legacy_one(
    client, database_url
) -> None:
    task = shell_task(client, overlap="allow")
    batch = client.trigger(task.id, requested_by="test", count=3)
    keys = [r["idempotency_key"] for r in query(database_url, "SELECT * FROM occurrence")]
    assert len({uuid.UUID(k) for k in keys}) == 3  # each its own random UUID
    # An instance row of a build before 0019 (a stale row of the squashed history) no longer
    # makes new occurrences store NULL (the legacy-key branch went with the squash, issue 45).
    query(
        database_url,
        "INSERT INTO instance (id, hostname, pid, version, schema_revision, concurrency,"
        " lease_ttl, lease_grace, reconcile_interval)"
        " VALUES ('old', 'h', 1, 'v', '0018', 1, '9 s', '3 s', '3 s')",
    )
    fresh = client.trigger(task.id, requested_by="test")
    (stored,) = query(
        database_url, "SELECT idempotency_key FROM occurrence WHERE id = %s", (fresh.id,)
    )
    assert uuid.UUID(stored["idempotency_key"])
    # An occurrence stored with NULL before the squash keeps the legacy key for every attempt.
    legacy = client.trigger(task.id, requested_by="test")
    query(database_url, "UPDATE occurrence SET idempotency_key = NULL WHERE id = %s", (legacy.id,))
    claimed = {r["id"]: r["idempotency_key"] for r in _claim(database_url)}
    assert claimed[legacy.id] == f"scheduler-daemon-occurrence-{legacy.id}"
    assert len(batch.occurrence_ids) == 3
    assert sorted(claimed[i] for i in batch.occurrence_ids) == sorted(keys)
