"""Notifications delivered by real daemons to a local receiver (issue 35 item 1, ADR 0016):
every (occurrence, event) arrives at least once, every copy of one with the same delivery_id;
a daemon killed between a POST and its record leaves a repeat with the same id; a receiver
answering 500 twice gets it on the third try."""

import signal
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from scheduler_daemon.runtime.root import POSTED_FILE_ENV
from scheduler_daemon.services.deliverer import POST_TIMEOUT_SECONDS
from tests.support import NotificationReceiver as Receiver
from tests.support import RawReceiver, query, wait_for

pytestmark = pytest.mark.slow
NO_PROXY = {"no_proxy": "*", "NO_PROXY": "*"}  # loopback only, never through a proxy


def _receiver(fail: int = 0) -> Iterator[Receiver]:
    receiver = Receiver(fail)
    yield receiver
    receiver.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from _receiver()


@pytest.fixture
def failing_receiver() -> Iterator[Receiver]:
    yield from _receiver(fail=2)


def _failing_tasks(cli, url: str, names: list[str], notify_url: str) -> None:
    for name in names:
        added = cli(
            "tasks", "add", name, "--every", "1h", "--command", "exit 3", "--overlap", "allow"
        )
        assert added.code == 0, added.err
    query(url, "UPDATE task SET notify_url = %s RETURNING id", (notify_url,))


def _outbox(url: str) -> list[dict[str, Any]]:
    return query(
        url,
        "SELECT occurrence_id, event, delivery_id::text, attempts, delivered_at, last_error"
        " FROM notification_outbox ORDER BY id",
    )


def test_every_notification_arrives_with_one_delivery_id_per_outbox_row(
    spawn, cli, database_url, receiver: Receiver
) -> None:
    names = [f"fails-{i}" for i in range(4)]
    _failing_tasks(cli, database_url, names, receiver.url)
    daemons = [spawn(database_url, name, env=NO_PROXY) for name in ("a", "b")]
    try:
        for daemon in daemons:
            daemon.instance_id()
        for name in names:
            for _ in range(2):
                assert cli("tasks", "trigger", name).code == 0
        rows = wait_for(
            lambda: (
                len(r := _outbox(database_url)) == 2 * len(names)
                and all(row["delivered_at"] for row in r)
                and r
            ),
            message="every notification delivered",
            timeout=45,
        )

    finally:
        for daemon in daemons:
            assert daemon.stop() == 0, daemon.log()
    copies = receiver.copies()
    assert set(copies) == {row["delivery_id"] for row in rows}  # as many ids as rows
    occurrences = {(row["occurrence_id"], row["event"]): row["delivery_id"] for row in rows}
    assert len(occurrences) == len(rows) == 8
    for delivery_id, posts in copies.items():
        bodies = {(p["body"]["occurrence_id"], p["body"]["event"]) for p in posts}
        assert len(bodies) == 1  # every copy of one id is one (occurrence, event)
        (key,) = bodies
        assert occurrences[key] == delivery_id
        for post in posts:
            assert post["headers"]["Idempotency-Key"] == delivery_id
            body = post["body"]
            assert (body["event"], body["outcome"], body["attempt"]) == ("failure", "failed", 1)
            assert body["task"] in names
            assert body["run_id"] is not None
            assert body["scheduled_for"] is not None


def test_a_receiver_answering_500_twice_gets_the_notification_on_the_third_try(
    spawn, cli, database_url, failing_receiver: Receiver
) -> None:
    _failing_tasks(cli, database_url, ["fails"], failing_receiver.url)
    daemon = spawn(database_url, "a", env=NO_PROXY)
    try:
        daemon.instance_id()
        assert cli("tasks", "trigger", "fails").code == 0
        (row,) = wait_for(
            lambda: (r := _outbox(database_url)) and r[0]["delivered_at"] and r,
            timeout=60,
            message="the notification delivered",
        )
        metrics_seen = "notification_failed" in daemon.log()
        status = cli("status", "--json").json()["notifications"]
    finally:
        assert daemon.stop() == 0, daemon.log()
    (posts,) = failing_receiver.copies().values()
    assert len(posts) == 3
    assert {p["body"]["delivery_id"] for p in posts} == {row["delivery_id"]}
    assert row["attempts"] == 3
    assert row["last_error"] is None
    assert metrics_seen
    assert (status["undelivered"], status["failing"]) == (0, 0)


def test_a_daemon_killed_between_a_post_and_its_record_leaves_a_repeat_with_the_same_id(
    spawn, cli, database_url, receiver: Receiver, tmp_path: Path
) -> None:
    """The injection point holds daemon `a` after its POST, before its record; SIGKILL there.
    Would fail against a deliverer that marked the row delivered before the POST (nothing
    repeats: the notification would be lost had the POST not left) or that made a new id per
    POST (two ids for one row)."""
    _failing_tasks(cli, database_url, ["fails"], receiver.url)
    posted = tmp_path / "posted"
    a = spawn(database_url, "a", env={**NO_PROXY, POSTED_FILE_ENV: str(posted)})
    a.instance_id()
    assert cli("tasks", "trigger", "fails").code == 0
    wait_for(lambda: posted.exists() and posted.read_text().strip(), message="a's first POST")
    a.signal(signal.SIGKILL)
    a.proc.wait(10)
    (row,) = _outbox(database_url)
    assert (row["delivered_at"], row["attempts"]) == (None, 1)  # posted, not recorded
    b = spawn(database_url, "b", env=NO_PROXY)
    try:
        b.instance_id()
        started = time.monotonic()
        (row,) = wait_for(
            lambda: (r := _outbox(database_url)) and r[0]["delivered_at"] and r,
            timeout=60,
            message="the notification delivered again by b",
        )
    finally:
        assert b.stop() == 0, b.log()
    (posts,) = receiver.copies().values()
    assert len(posts) == 2
    assert {p["body"]["delivery_id"] for p in posts} == {row["delivery_id"]}
    assert posted.read_text().split() == [row["delivery_id"]]
    assert row["attempts"] == 2
    assert time.monotonic() - started < 30


def test_sigterm_ends_a_daemon_posting_to_a_dripping_receiver_within_the_deadline_and_5_s(
    spawn, cli, database_url
) -> None:
    """A receiver answers a byte a second, for ever. SIGTERM while its POST is in flight: the
    POST ends at its 10 s deadline, is recorded `timed out`, and the daemon exits within the
    deadline plus 5 s of the signal (ADR 0016). The old deliverer's per-read timeout never
    fired: the POST outlived the daemon's 15 s wait for it, the row was left unrecorded, and
    the stop took 16-17 s."""
    drip = RawReceiver(lambda send: None)
    drip.drip(every=1.0)
    try:
        _failing_tasks(cli, database_url, ["fails"], drip.url)
        daemon = spawn(database_url, "a", env=NO_PROXY)
        daemon.instance_id()
        assert cli("tasks", "trigger", "fails").code == 0
        wait_for(lambda: drip.requests == 1, timeout=30, message="the POST to the drip")
        signalled = time.monotonic()
        daemon.signal(signal.SIGTERM)
        assert daemon.proc.wait(POST_TIMEOUT_SECONDS + 10) == 0, daemon.log()
        stopped = time.monotonic() - signalled
    finally:
        drip.close()
    (row,) = _outbox(database_url)
    assert (row["delivered_at"], row["attempts"]) == (None, 1)
    assert row["last_error"] == f"timed out after {POST_TIMEOUT_SECONDS:g} s"
    assert stopped <= POST_TIMEOUT_SECONDS + 5, stopped


def test_a_deadline_notification_arrives_for_a_firing_stuck_behind_a_running_forbid_job(
    spawn, cli, database_url, receiver: Receiver
) -> None:
    """A `forbid` task fires every 2 s while its first job sleeps 20 s: the firings behind it
    are skipped, and each one not succeeded 1 s after its scheduled time gets one `deadline`
    notification, the running one too."""
    added = cli(
        "tasks",
        "add",
        "slow",
        "--every",
        "2s",
        "--command",
        "sleep 20",
        "--overlap",
        "forbid",
        "--misfire",
        "skip",
        "--deadline",
        "1s",
        "--notify",
        receiver.url,
        "--notify-on",
        "deadline",
    )
    assert added.code == 0, added.err
    daemon = spawn(database_url, "a", env=NO_PROXY)
    try:
        daemon.instance_id()

        def arrived() -> dict[str, list[dict[str, Any]]] | None:
            outcomes = {posts[0]["body"]["outcome"] for posts in receiver.copies().values()}
            return receiver.copies() if {"running", "skipped"} <= outcomes else None

        copies = wait_for(
            arrived, timeout=30, message="deadline notifications, running and skipped"
        )
        rows = _outbox(database_url)
    finally:
        assert daemon.stop() == 0, daemon.log()
    for posts in copies.values():
        assert {p["body"]["event"] for p in posts} == {"deadline"}
    ids = [p["body"]["occurrence_id"] for posts in copies.values() for p in posts[:1]]
    assert len(ids) == len(set(ids))  # once per firing
    assert {r["event"] for r in rows} == {"deadline"}


def test_notifications_carry_their_headers_a_secret_resolved_and_masked_where_shown(  # noqa: PLR0917 - fixtures
    spawn, cli, database_url, receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's own notify headers (one from a `${SCHEDULER_SECRET_*}` reference, resolved by
    `tasks apply`: the daemon's environment has no such variable) go to its own URL, the
    fleet's notify-headers to the fleet's URL, each POST with only its own; `tasks export`
    writes the reference, `tasks show` and `config show` print the secrets as ***."""
    monkeypatch.setenv("SCHEDULER_SECRET_HOOK_TOKEN", "t0ken")
    path = tmp_path / "tasks.toml"
    path.write_text(
        f'[own]\ncommand = "exit 3"\nevery = "1h"\nnotify = "{receiver.url}"\n'
        'notify-headers = { Authorization = "Bearer ${SCHEDULER_SECRET_HOOK_TOKEN}", '
        'X-Team = "ops" }\n\n[fleet]\ncommand = "exit 3"\nevery = "1h"\n'
    )
    assert cli("tasks", "apply", "-f", str(path), "--source", "s").code == 0
    assert cli("config", "set", "notify-url", f"{receiver.url}?fleet").code == 0
    assert cli("config", "set", "notify-headers", "X-Api-Key: f1eet").code == 0
    monkeypatch.delenv("SCHEDULER_SECRET_HOOK_TOKEN")
    daemon = spawn(database_url, "a", env=NO_PROXY)
    try:
        daemon.instance_id()
        for name in ("own", "fleet"):
            assert cli("tasks", "trigger", name).code == 0
        wait_for(
            lambda: {p[0]["body"]["task"] for p in receiver.copies().values()} == {"own", "fleet"},
            timeout=45,
            message="both notifications delivered",
        )
    finally:
        assert daemon.stop() == 0, daemon.log()
    sent = {
        posts[0]["body"]["task"]: {k.lower(): v for k, v in posts[0]["headers"].items()}
        for posts in receiver.copies().values()
    }
    assert (sent["own"]["authorization"], sent["own"]["x-team"]) == ("Bearer t0ken", "ops")
    assert "x-api-key" not in sent["own"]
    assert sent["fleet"]["x-api-key"] == "f1eet"
    assert "authorization" not in sent["fleet"]
    exported = cli("tasks", "export", "own").out
    assert '"Authorization" = "Bearer ${SCHEDULER_SECRET_HOOK_TOKEN}"' in exported
    assert "t0ken" not in exported
    shown = cli("tasks", "show", "own", "--json").json()["notify_headers"]
    assert shown == {"Authorization": "***", "X-Team": "ops"}
    assert cli("config", "show", "--json").json()["notify-headers"] == {"X-Api-Key": "***"}
    assert "t0ken" not in daemon.log()
    assert "f1eet" not in daemon.log()


def _deadline_posts(receiver: Receiver) -> dict[str, list[dict[str, Any]]]:
    """The `deadline` notifications received, by the firing's scheduled time."""
    by_firing: dict[str, list[dict[str, Any]]] = {}
    for posts in receiver.copies().values():
        if posts[0]["body"]["event"] == "deadline":
            by_firing.setdefault(posts[0]["body"]["scheduled_for"], []).append(posts[0]["body"])
    return by_firing


def _passes(daemon: Any, more: int) -> None:
    """Waits until `daemon` ran `more` reconcile passes from now."""
    passes = daemon.log().count('"reconcile_pass"')
    wait_for(
        lambda: daemon.log().count('"reconcile_pass"') >= passes + more,
        timeout=30,
        message=f"{more} more reconcile passes",
    )


def _one_shot(cli: Any, url: str, name: str, receiver: Receiver, *, due: str) -> dict[str, Any]:
    """A one-shot with a 1 s deadline that notifies `deadline` to `receiver`, due at the
    database's now plus `due` (an interval, negative for the past); its id and due time."""
    added = cli(
        "tasks",
        "add",
        name,
        "--at",
        "2099-01-01T00:00:00Z",
        "--notify",
        receiver.url,
        "--deadline",
        "1s",
        "--notify-on",
        "deadline",
        "--command",
        "true",
    )
    assert added.code == 0, added.err
    (task,) = query(
        url,
        "UPDATE task SET run_at = now() + %s::interval, next_run_at = now() + %s::interval"
        " WHERE name = %s RETURNING id, next_run_at",
        (due, due, name),
    )
    return task


DEBUG = {**NO_PROXY, "SCHEDULER_LOG_LEVEL": "debug"}  # `reconcile_pass` is a debug event


def test_a_firing_due_while_no_daemon_ran_past_its_deadline_and_the_lookback_notifies_once(
    spawn, cli, database_url, receiver: Receiver
) -> None:
    """A one-shot fell due 3 hours ago while no daemon ran (past its 1 s deadline, and past the
    scan's one-hour lookback), the fleet's last scan before that: the daemon that starts
    notifies `deadline` once for that firing, whether its scan saw it due and unrecorded first
    or its dispatcher recorded it first. Would fail against the fixed lookback and the
    occurrence-only scan (nothing at all: the firing is 3 hours old when it gets its row)."""
    task = _one_shot(cli, database_url, "late", receiver, due="-3 hours")
    query(
        database_url,
        "UPDATE deadline_mark SET judged_through = now() - interval '3 hours 1 minute'"
        " RETURNING id",
    )
    daemon = spawn(database_url, "a", env=DEBUG)
    try:
        daemon.instance_id()
        wait_for(lambda: _deadline_posts(receiver), timeout=30, message="the deadline POST")
        wait_for(
            lambda: query(
                database_url, "SELECT 1 FROM occurrence WHERE task_id = %s", (task["id"],)
            ),
            message="the firing recorded",
        )
        _passes(daemon, 3)
        rows = _outbox(database_url)
    finally:
        assert daemon.stop() == 0, daemon.log()
    (posts,) = _deadline_posts(receiver).values()
    assert len(posts) == 1
    assert posts[0]["task"] == "late"
    assert datetime.fromisoformat(posts[0]["scheduled_for"]) == task["next_run_at"]
    assert [r["event"] for r in rows] == ["deadline"]


def test_a_firing_held_undispatched_past_its_deadline_notifies_once_before_and_after_its_row(
    spawn, cli, database_url, receiver: Receiver
) -> None:
    """Another session holds the task's row, so no dispatch can record its firing: the daemon
    notifies `deadline` for it with no occurrence (outcome null) once its deadline passed; when
    the row is released and the firing recorded (and run, late), no second notification comes.
    Would fail against a scan of occurrence rows only (nothing while it is held) and a key on
    the occurrence only (a second notification once it is recorded)."""
    task = _one_shot(cli, database_url, "held", receiver, due="1 second")
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT id FROM task WHERE id = %s FOR UPDATE", (task["id"],))
        daemon = spawn(database_url, "a", env=DEBUG)
        try:
            daemon.instance_id()
            (posts,) = wait_for(
                lambda: list(_deadline_posts(receiver).values()),
                timeout=30,
                message="the deadline of the held firing",
            )
            assert query(database_url, "SELECT id FROM occurrence") == []  # still held
            holder.rollback()
            wait_for(
                lambda: query(
                    database_url,
                    "SELECT 1 FROM occurrence WHERE task_id = %s AND status = 'success'",
                    (task["id"],),
                ),
                message="the firing recorded and run",
            )
            _passes(daemon, 3)
        finally:
            assert daemon.stop() == 0, daemon.log()
    ((only,),) = _deadline_posts(receiver).values()
    assert posts == [only]
    assert (only["occurrence_id"], only["outcome"], only["attempt"]) == (None, None, 0)
    assert only["reason"] == "not dispatched within its deadline of 1 s"
    assert [r["event"] for r in _outbox(database_url)] == ["deadline"]
