"""Notifications as a task field and a fleet setting (issue 35 item 1, ADR 0016): `--notify URL`
and `--notify-on EVENTS` on add, update, apply and export, `config set notify-url/notify-on`;
bad input is one line, exit 2, nothing written."""

import tomllib
from datetime import timedelta
from pathlib import Path

import pytest

from tests.support import query

ADD = ("tasks", "add", "t", "--every", "1h", "--command", "true")
HOOK = "https://hooks.example/notify"


def test_notify_fields_are_stored_shown_with_the_password_masked_and_cleared(cli, db) -> None:
    with_password = "https://robot:pw@hooks.example/n"
    added = cli(*ADD, "--notify", with_password, "--notify-on", "failure,skipped", "--json")
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


# -- --notify-header, `notify-headers` in task files and `config set notify-headers` ------------
HEADERS = ("--notify", HOOK, "--notify-header", "Authorization: Bearer s3cret")


def test_notify_headers_are_stored_shown_masked_replaced_and_cleared(cli, db) -> None:
    """The http executor's header rules and masking: a secret header's value is *** in `show`
    and `--json` unless `--show-secrets`; `--notify-header` replaces them all, `none` clears
    them, and so does clearing the URL they belong to."""
    added = cli(*ADD, *HEADERS, "--notify-header", "X-Team: ops", "--json")
    assert added.code == 0, added.err
    assert added.json()["notify_headers"] == {"Authorization": "***", "X-Team": "ops"}
    (row,) = db.execute("SELECT notify_headers, notify_header_refs FROM task").fetchall()
    assert row == {
        "notify_headers": {"Authorization": "Bearer s3cret", "X-Team": "ops"},
        "notify_header_refs": None,
    }
    assert "s3cret" not in cli("tasks", "show", "t").out
    assert "s3cret" not in cli("tasks", "list", "--json").out
    shown = cli("tasks", "show", "t", "--show-secrets", "--json").json()
    assert shown["notify_headers"]["Authorization"] == "Bearer s3cret"
    updated = cli("tasks", "update", "t", "--notify-header", "X-Other: 1", "--json")
    assert updated.json()["notify_headers"] == {"X-Other": "1"}
    assert cli("tasks", "update", "t", "--notify-header", "none").code == 0
    assert db.execute("SELECT notify_headers FROM task").fetchone()["notify_headers"] is None
    assert cli("tasks", "update", "t", "--notify-header", "X-Other: 1").code == 0
    cleared = cli("tasks", "update", "t", "--notify", "none", "--json")
    assert (cleared.json()["notify_url"], cleared.json()["notify_headers"]) == (None, {})


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (
            ("--notify-header", "Bad Name: x"),
            "--notify-header name 'Bad Name' is not a valid HTTP header name",
        ),
        (
            ("--notify-header", "Idempotency-Key: 1"),
            "--notify-header Idempotency-Key is set by the deliverer itself",
        ),
        (
            ("--notify-header", "A: 1", "--notify-header", "a: 2"),
            "--notify-header a is given twice",
        ),
        (
            ("--notify-header", "Authorization"),
            "--notify-header needs 'NAME: VALUE' (what was given is not shown)",
        ),
        (
            ("--notify-header", "X: a\nb"),
            "--notify-header X: the value must not contain line breaks or NUL",
        ),
        (
            ("--notify-header", "X: " + "a" * 65536),
            "--notify-header: the headers are 65545 bytes; the limit is 65536 bytes",
        ),
    ],
)
def test_bad_notify_headers_are_one_line_exit_2_and_write_nothing(
    cli, counts, options, error
) -> None:
    before = counts()
    result = cli(*ADD, "--notify", HOOK, *options)
    assert (result.code, result.err, result.out) == (2, f"error: {error}\n", "")
    assert counts() == before
    assert cli(*ADD, "--notify", HOOK).code == 0
    before = counts()
    updated = cli("tasks", "update", "t", *options)
    assert (updated.code, updated.err) == (2, f"error: {error}\n")
    assert counts() == before
    fleet = cli("config", "set", "notify-headers", *options[1::2])
    assert (fleet.code, fleet.err) == (
        2,
        "error: " + error.replace("--notify-header", "notify-headers") + "\n",
    )
    assert counts() == before


def test_notify_headers_need_the_tasks_own_notify_url(cli, counts) -> None:
    before = counts()
    result = cli(*ADD, "--notify-header", "X-Team: ops")
    assert (result.code, result.err) == (
        2,
        "error: --notify-header needs --notify (the fleet's notify-url gets its notify-headers)\n",
    )
    assert counts() == before


def test_apply_and_export_carry_notify_headers_as_references_and_masks(
    cli, tmp_path: Path, database_url, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `${SCHEDULER_SECRET_*}` value is resolved when applied and exported as its reference;
    a secret header given as it is is exported `***`, which apply reads as the stored value:
    `export | apply` changes nothing."""
    monkeypatch.setenv("SCHEDULER_SECRET_HOOK_TOKEN", "t0ken")
    path = tmp_path / "tasks.toml"
    path.write_text(
        f'[t]\ncommand = "true"\nevery = "1h"\nnotify = "{HOOK}"\n'
        'notify-headers = { Authorization = "Bearer ${SCHEDULER_SECRET_HOOK_TOKEN}", '
        'X-Api-Key = "k3y", X-Team = "ops" }\n'
    )
    applied = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert applied.code == 0, applied.err
    (row,) = query(database_url, "SELECT notify_headers, notify_header_refs FROM task")
    assert row["notify_headers"] == {
        "Authorization": "Bearer t0ken",
        "X-Api-Key": "k3y",
        "X-Team": "ops",
    }
    assert row["notify_header_refs"] == {"Authorization": "Bearer ${SCHEDULER_SECRET_HOOK_TOKEN}"}
    exported = cli("tasks", "export").out
    assert tomllib.loads(exported)["t"]["notify-headers"] == {
        "Authorization": "Bearer ${SCHEDULER_SECRET_HOOK_TOKEN}",
        "X-Api-Key": "***",
        "X-Team": "ops",
    }
    assert "t0ken" not in exported
    assert "k3y" not in exported
    shown = cli("tasks", "show", "t", "--json").json()["notify_headers"]
    assert shown == {"Authorization": "***", "X-Api-Key": "***", "X-Team": "ops"}
    assert "k3y" in cli("tasks", "export", "--include-secrets").out
    before = query(database_url, "SELECT * FROM task ORDER BY id")
    path.write_text(exported)
    again = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert again.out.splitlines() == ["1 task(s) in the file, 0 change(s)"], again.err
    assert query(database_url, "SELECT * FROM task ORDER BY id") == before
    path.write_text(exported.replace('"X-Team"', '"X-New"').replace('"ops"', '"***"'))
    bad = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert (bad.code, bad.err) == (
        2,
        "error: task 't': field 'notify-headers': header X-New is masked (***) with no stored "
        "value to keep; give it or a ${VAR} reference\n",
    )
    assert query(database_url, "SELECT * FROM task ORDER BY id") == before


def test_config_set_notify_headers_stores_the_fleet_headers_masked_when_shown(cli, db) -> None:
    result = cli(
        "config", "set", "notify-headers", "Authorization: Bearer f1eet", "X-Team: ops", "--json"
    )
    assert result.code == 0, result.err
    assert result.json() == {"notify-headers": {"Authorization": "***", "X-Team": "ops"}}
    assert "f1eet" not in cli("config", "set", "notify-headers", "Authorization: Bearer f1eet").out
    again = cli("config", "set", "notify-headers", "Authorization: Bearer f1eet", "X-Team: ops")
    assert again.code == 0
    (row,) = db.execute("SELECT value FROM fleet_setting WHERE key = 'notify_headers'").fetchall()
    assert row["value"] == {"Authorization": "Bearer f1eet", "X-Team": "ops"}
    shown = cli("config", "show", "--json").json()
    assert shown["notify-headers"] == {"Authorization": "***", "X-Team": "ops"}
    assert "f1eet" not in cli("config", "show").out
    too_many = cli("config", "set", "notify-on", "failure", "timeout")
    assert (too_many.code, too_many.err) == (2, "error: notify-on takes one VALUE, got 2\n")
    assert cli("config", "show", "--json").json().get("notify-on") is None
    assert cli("config", "set", "notify-headers", "none").code == 0
    (row,) = db.execute("SELECT value FROM fleet_setting WHERE key = 'notify_headers'").fetchall()
    assert row["value"] is None
