"""`status`: each instance's state from real instance rows whose heartbeat is pinned on the
database clock (no sleeps), and the warning for queued work no live instance runs."""

import pytest

# Lease settings of every planted instance: its lease ends 30 s after its last heartbeat, its
# takeover bound is 45 s (TTL + grace + reconcile interval). Each planted silence is 7 s or more
# from either line, far more than a test takes.
PLANT = (
    "INSERT INTO instance (id, hostname, pid, version, schema_revision, concurrency, lease_ttl, "
    "lease_grace, reconcile_interval, slots_in_use, stopping, started_at, heartbeat_at) "
    "VALUES (%(id)s, 'host', 1, '0.1.0', '0021', 4, '30s', '10s', '5s', 1, %(stopping)s, "
    "clock_timestamp() - %(silent)s::interval - interval '1 minute', "
    "clock_timestamp() - %(silent)s::interval)"
)


def _plant(db, name: str, silent: str, *, stopping: bool = False) -> None:
    db.execute(PLANT, {"id": name, "silent": silent, "stopping": stopping})


@pytest.mark.parametrize(
    ("planted", "state", "words"),
    [
        (("1 s", False), "live", "live"),
        (("1 s", True), "draining", "draining"),
        (("38 s", False), "silent_past_lease", "silent past its lease"),
        (("38 s", True), "silent_past_lease", "silent past its lease"),
        (("10 min", False), "past_takeover_bound", "past the takeover bound"),
    ],
)
def test_status_gives_each_instance_its_state(cli, db, planted, state, words) -> None:
    silent, stopping = planted
    _plant(db, "i-1", silent, stopping=stopping)
    shown = cli("status", "--json").json()
    (instance,) = shown["instances"]
    assert (instance["id"], instance["state"]) == ("i-1", state)
    assert shown["live_instances"] == (1 if state == "live" else 0)
    table = cli("status").out.splitlines()
    assert table[0].split()[:2] == ["ID", "STATE"]
    assert table[1].startswith(f"i-1  {words}  ")


def test_status_warns_when_queued_work_has_no_live_instance(cli, db) -> None:
    """A SIGKILLed daemon's row stays registered (SLOTS 1/4) until it expires; with nothing else
    registered but it and a draining one, the queued firings are warned of."""
    assert (
        cli("tasks", "add", "q", "--every", "1h", "--command", "true", "--overlap", "allow").code
        == 0
    )
    for _ in range(4):
        assert cli("tasks", "trigger", "q").code == 0
    _plant(db, "dead", "38 s")
    _plant(db, "leaving", "1 s", stopping=True)
    shown = cli("status", "--json").json()
    assert shown["queue_depth"] == 4
    assert shown["warnings"] == [
        "4 queued occurrence(s) and no live instance to run them (the registered are "
        "1 silent past its lease, 1 draining); start `scheduler-daemon run`"
    ]
    assert f"\nwarning: {shown['warnings'][0]}\n" in cli("status").out
    _plant(db, "alive", "1 s")
    shown = cli("status", "--json").json()
    assert (shown["warnings"], shown["live_instances"]) == ([], 1)
    assert "warning:" not in cli("status").out


def test_status_does_not_warn_of_an_empty_queue_without_instances(cli) -> None:
    shown = cli("status", "--json").json()
    assert (shown["instances"], shown["queue_depth"], shown["warnings"]) == ([], 0, [])


def test_status_warns_when_a_task_is_past_its_misfire_grace_and_no_instance_is_live(
    cli, db
) -> None:
    """A stopped fleet queues nothing, so the queue warning stayed silent and `status` said
    nothing while every schedule stood still (the old code had no such field or line)."""
    assert cli("tasks", "add", "s", "--every", "1s", "--command", "true").code == 0
    # Within its misfire grace (1 min by default): a dispatcher may just be busy.
    db.execute("UPDATE task SET next_run_at = now() - interval '30 seconds'")
    shown = cli("status", "--json").json()
    assert (shown["overdue_tasks"]["count"], shown["warnings"]) == (0, [])
    db.execute("UPDATE task SET next_run_at = now() - interval '5 minutes'")
    shown = cli("status", "--json").json()
    oldest = shown["overdue_tasks"]["oldest_next_run_at"]
    assert shown["overdue_tasks"]["count"] == 1
    assert oldest is not None
    assert shown["warnings"] == [
        f"1 task(s) past their next firing by more than their misfire grace (the oldest due "
        f"{oldest}) and no live instance to dispatch them (no instance is registered); start "
        "`scheduler-daemon run`"
    ]
    assert f"\nwarning: {shown['warnings'][0]}\n" in cli("status").out
    _plant(db, "alive", "1 s")
    shown = cli("status", "--json").json()
    assert (shown["overdue_tasks"]["count"], shown["warnings"]) == (1, [])  # a late dispatcher
    assert "warning:" not in cli("status").out
