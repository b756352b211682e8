"""Notifications as a task field and a fleet setting (issue 35 item 1, ADR 0016): `--notify URL`
and `--notify-on EVENTS` on add, update, apply and export, `config set notify-url/notify-on`;
bad input is one line, exit 2, nothing written; refused while a build before revision 0025,
which would record none, is registered (ADR 0010's pattern, its race forced)."""

from datetime import timedelta
from pathlib import Path

import pytest

from scheduler_daemon.domain import control
from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.storage import migration
from scheduler_daemon.storage.error import Conflict
from tests.support import OLD_INSTANCE, query, write_during_registration

ADD = ("tasks", "add", "t", "--every", "1h", "--command", "true")
HOOK = "https://hooks.example/notify"
REFUSED = (
    "cannot have notifications while instance(s) old-a (host old-host, version 0.9.0, schema "
    f"0024) of builds before schema {control.NOTIFY_SINCE} are registered (they would record "
    "none); roll them to this build, or wait until a stopped one's row expires\n"
)


@pytest.fixture
def old_instance(db) -> str:
    db.execute(OLD_INSTANCE, ("old-a", "0024"))
    return "old-a"


def test_notify_fields_are_stored_shown_with_the_password_masked_and_cleared(cli, db) -> None:
    added = cli(
        *ADD,
        "--notify",
        "https://robot:pw@hooks.example/n",
        "--notify-on",
        "failure,skipped",
        "--json",
    )
    assert added.code == 0, added.err
    shown = added.json()
    assert (shown["notify_url"], shown["notify_on"]) == (
        "https://robot:***@hooks.example/n",
        ["failure", "skipped"],
    )
    (row,) = db.execute("SELECT notify_url, notify_on FROM task").fetchall()
    assert row == {
        "notify_url": "https://robot:pw@hooks.example/n",
        "notify_on": ["failure", "skipped"],
    }
    assert cli("tasks", "update", "t", "--notify-on", "none").code == 0
    assert cli("tasks", "update", "t", "--notify", "none").code == 0
    (row,) = db.execute("SELECT notify_url, notify_on FROM task").fetchall()
    assert row == {"notify_url": None, "notify_on": None}


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (
            ("--notify-on", "failure,bogus"),
            "error: --notify-on: unknown event 'bogus'; the "
            "events are failure, timeout, skipped, expired, deadline\n",
        ),
        (
            ("--notify", "ftp://hooks.example/n"),
            "error: --notify needs an http:// or https:// URL, got 'ftp://hooks.example/n'\n",
        ),
        (("--notify-on", "failure,failure"), "error: --notify-on: an event is given twice\n"),
    ],
)
def test_bad_notify_input_is_one_line_exit_2_and_writes_nothing(
    cli, counts, options, error
) -> None:
    before = counts()
    result = cli(*ADD, *options)
    assert (result.code, result.err, result.out) == (2, error, "")
    assert counts() == before
    assert cli(*ADD).code == 0
    before = counts()
    updated = cli("tasks", "update", "t", *options)
    assert (updated.code, updated.err) == (2, error)
    assert counts() == before


def test_apply_and_export_carry_the_notify_fields_and_a_masked_password_is_kept(
    cli, tmp_path: Path, database_url
) -> None:
    path = tmp_path / "tasks.toml"
    path.write_text(
        '[t]\ncommand = "true"\nevery = "1h"\nnotify = "https://robot:pw@hooks.example/n"\n'
        'notify-on = ["timeout", "expired"]\n'
    )
    applied = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert applied.code == 0, applied.err
    exported = cli("tasks", "export").out
    assert 'notify = "https://robot:***@hooks.example/n"' in exported
    assert 'notify-on = ["timeout", "expired"]' in exported
    before = query(database_url, "SELECT * FROM task ORDER BY id")
    path.write_text(exported)
    again = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert again.out.splitlines() == ["1 task(s) in the file, 0 change(s)"], again.err
    assert query(database_url, "SELECT * FROM task ORDER BY id") == before
    path.write_text('[t]\ncommand = "true"\nevery = "1h"\nnotify-on = ["nope"]\n')
    bad = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert bad.code == 2
    assert "unknown event 'nope'" in bad.err
    assert query(database_url, "SELECT * FROM task ORDER BY id") == before


def test_config_set_notify_url_and_notify_on_store_the_fleet_defaults(cli, counts, db) -> None:
    assert cli("config", "set", "notify-url", HOOK).code == 0
    assert cli("config", "set", "notify-on", "failure, expired").code == 0
    rows = db.execute(
        "SELECT key, value FROM fleet_setting WHERE key LIKE 'notify%%' ORDER BY key"
    ).fetchall()
    assert rows == [
        {"key": "notify_on", "value": ["failure", "expired"]},
        {"key": "notify_url", "value": HOOK},
    ]
    before = counts()
    for name, value, error in [
        (
            "notify-url",
            "mailto:x@y",
            "notify-url needs an http:// or https:// URL, got 'mailto:x@y'",
        ),
        (
            "notify-on",
            "failure,later",
            "notify-on: unknown event 'later'; the events are failure, timeout, skipped, "
            "expired, deadline",
        ),
    ]:
        result = cli("config", "set", name, value)
        assert (result.code, result.err) == (2, f"error: {error}\n")
    assert counts() == before
    assert cli("config", "set", "notify-url", "https://robot:pw@hooks.example/n").code == 0
    assert "https://robot:***@hooks.example/n" in cli("config", "show").out
    assert cli("config", "set", "notify-url", "none").code == 0


def test_notifications_are_refused_while_an_older_build_is_registered(
    cli, counts, db, old_instance, tmp_path: Path
) -> None:
    before = counts()
    result = cli(*ADD, "--notify", HOOK)
    assert (result.code, result.err, result.out) == (2, "error: task 't' " + REFUSED, "")
    assert counts() == before
    assert cli(*ADD).code == 0  # without notifications: not refused
    updated = cli("tasks", "update", "t", "--notify-on", "failure")
    assert (updated.code, updated.err) == (2, "error: task 't' " + REFUSED)
    path = tmp_path / "tasks.toml"
    path.write_text(f'[u]\ncommand = "true"\nevery = "1h"\nnotify = "{HOOK}"\n')
    applied = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert applied.code == 2
    assert "old-a" in applied.err
    fleet = cli("config", "set", "notify-url", HOOK)
    assert (fleet.code, fleet.err) == (2, "error: the fleet " + REFUSED)
    assert cli("tasks", "update", "t", "--notify", "none").code == 0  # clearing: never refused
    assert (
        db.execute("SELECT count(*) AS n FROM task WHERE notify_url IS NOT NULL").fetchone()["n"]
        == 0
    )
    db.execute(OLD_INSTANCE, ("new-a", migration.head_revision()))
    db.execute("DELETE FROM instance WHERE id = 'old-a'")
    assert cli("tasks", "update", "t", "--notify", HOOK).code == 0


def test_an_older_build_registering_while_a_notifying_task_is_added_is_seen_and_refuses_it(
    client, database_url, counts
) -> None:
    """A registration in progress holds the compatibility lock shared and has inserted its
    (uncommitted) row; the add must wait for it and see the row. Fails against a check that
    reads the instances without that lock: it sees no row and commits the task beside a build
    that records no notification."""
    before = counts()
    spec = TaskSpec(
        name="t", executor="shell", target="true", every=timedelta(hours=1), notify_url=HOOK
    )
    error = write_during_registration(
        database_url, lambda: client.add_task(spec), "old-late", "0024"
    )
    assert isinstance(error, Conflict), error
    assert "old-late (host old-host, version 0.9.0, schema 0024)" in str(error)
    assert counts() == {**before, "instance": before["instance"] + 1}


def test_a_deadline_longer_than_the_retention_is_one_line_exit_2_and_writes_nothing(
    cli, counts, db, tmp_path: Path
) -> None:
    assert cli("config", "set", "history-retention", "1d").code == 0
    before = counts()
    result = cli(*ADD, "--deadline", "2d")
    assert (result.code, result.out) == (2, "")
    assert result.err == (
        "error: --deadline 2d is longer than the history retention (1d): its firing could be "
        "pruned first\n"
    )
    assert counts() == before
    added = cli(*ADD, "--deadline", "2d", "--history-retention", "3d", "--json")
    assert added.code == 0, added.err
    assert added.json()["deadline_seconds"] == 172800
    refused = cli("tasks", "update", "t", "--history-retention", "none", "--deadline", "5d")
    assert refused.code == 2
    assert "--deadline 5d is longer than the history retention (1d)" in refused.err
    exported = cli("tasks", "export").out
    assert 'deadline = "2d"' in exported
    (row,) = db.execute("SELECT deadline FROM task").fetchall()
    assert row["deadline"] == timedelta(days=2)


def test_a_notify_url_past_8_kib_is_one_line_exit_2_and_writes_nothing(cli, counts) -> None:
    before = counts()
    long = "https://hooks.example/" + "a" * 8192
    added = cli(*ADD, "--notify", long)
    assert (added.code, added.err) == (2, "error: --notify is longer than 8192 bytes\n")
    fleet = cli("config", "set", "notify-url", long)
    assert (fleet.code, fleet.err) == (2, "error: notify-url is longer than 8192 bytes\n")
    assert counts() == before
