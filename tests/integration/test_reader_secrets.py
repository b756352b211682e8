"""The reader role cannot read secrets (issue 46 item 4, ADR 0031), and the action log records who
logged in (item 5): as the real roles of `db roles`, SQL on each secret column is refused to the
reader while every reader-side command and console page still works and shows the secrets
masked; the operator's export keeps them and an apply of the reader's masked export changes
nothing; an action row the operator inserts with a forged role records the real one.

Each test fails on the build before: its `db roles` granted the reader SELECT on whole tables
(`test_the_reader_may_not_select_a_secret_column` puts that grant back and reads every secret),
the statements read the columns themselves, and operator_action had no session_role."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from scheduler_daemon.domain.secret import is_secret_arg, reader_masked_url
from scheduler_daemon.storage import roles
from tests.console_process import BASE
from tests.integration.test_from_0037 import _restore
from tests.role_fleet import RoleFleet, role_fleet

pytestmark = pytest.mark.slow

# Each a secret the reader must never see, in every place one is kept.
SECRETS = {
    "url_password": "URLPASS-a1",
    "url_path": "TOKENPATH-b2",
    "url_query": "QUERY-c3",
    "header": "HDR-d4",
    "plain_header": "PLAINHDR-e5",  # not a secret header's name: the reader sees no value at all
    "notify_path": "NOTIFYPATH-f6",
    "notify_header": "NHDR-g7",
    "fleet_path": "FLEETPATH-h8",
    "fleet_header": "FHDR-i9",
    "arg": "ARG-j10",
}
TASK_FILE = f"""source = "team"

["hook"]
http = "https://user:{SECRETS["url_password"]}@api.example.com/{SECRETS["url_path"]}?key={SECRETS["url_query"]}"
every = "1h"
headers = {{ Authorization = "Bearer {SECRETS["header"]}", X-Plain = "{SECRETS["plain_header"]}" }}
notify = "https://hooks.example.com/services/{SECRETS["notify_path"]}"
notify-headers = {{ X-Token = "{SECRETS["notify_header"]}" }}
"""


def _as(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True, row_factory=dict_row)


def _refused(url: str, statement: str) -> str:
    """The one line PostgreSQL refuses `statement` with, as the role of `url`."""
    with _as(url) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
        conn.execute(statement)  # type: ignore[arg-type]
    return str(refused.value).splitlines()[0]


def _define(fleet: RoleFleet, cli: Any, tmp_path: Path) -> int:
    """The secrets, written by the operator role: an http task from a file, the fleet's notify
    settings, a manual firing with arguments. Returns the occurrence's id."""
    path = tmp_path / "team.toml"
    path.write_text(TASK_FILE)
    op = fleet.operator
    assert cli("tasks", "apply", "-f", str(path), url=op).code == 0
    url = f"https://fleet.example.com/{SECRETS['fleet_path']}"
    assert cli("config", "set", "notify-url", url, url=op).code == 0
    header = f"Authorization: {SECRETS['fleet_header']}"
    assert cli("config", "set", "notify-headers", header, url=op).code == 0
    fired = cli(
        "tasks",
        "trigger",
        "hook",
        "--arg",
        f"api_key={SECRETS['arg']}",
        "--arg",
        "region=eu",
        "--json",
        url=op,
    )
    assert fired.code == 0, fired.err
    return int(fired.json()["id"])


@pytest.fixture
def fleet(database_url: str) -> Iterator[RoleFleet]:
    with role_fleet(database_url) as made:
        yield made


def _no_secret(text: str, where: Any) -> None:
    for name, value in SECRETS.items():
        assert value not in text, (where, name)


def test_the_reader_may_not_select_a_secret_column(
    fleet: RoleFleet, cli: Any, tmp_path: Path
) -> None:
    """Each secret column is `permission denied` to the reader, which reads the views masked
    while a writer reads them as stored. Then the grant of the build before (SELECT on the whole
    table, put back by hand) is shown to hand the reader every secret, and `db roles` takes it
    away again: with the old `db roles` this test fails at its first refusal (checked: with
    SECRET_COLUMNS ignored, `DID NOT RAISE InsufficientPrivilege`)."""
    _define(fleet, cli, tmp_path)
    for table, columns in roles.SECRET_COLUMNS.items():
        for column in columns:
            line = _refused(fleet.reader, f"SELECT {column} FROM {table}")
            assert line == f"permission denied for table {table}", (table, column)
        _refused(fleet.reader, f"SELECT * FROM {table}")
    # The statement of the issue, and a way round the column list: a whole-row reference.
    _refused(fleet.reader, "SELECT payload, notify_url, notify_headers FROM task")
    _refused(fleet.reader, "SELECT t FROM task t")
    with _as(fleet.reader) as conn:  # the other columns it reads, and the masks
        assert conn.execute("SELECT name FROM task").fetchone() == {"name": "hook"}
        _no_secret(json.dumps(conn.execute("SELECT * FROM task_secret_shown").fetchall()), "v")
        shown = conn.execute("SELECT * FROM fleet_setting_shown").fetchall()
        _no_secret(json.dumps(shown, default=str), "fleet_setting_shown")
        events = conn.execute("SELECT * FROM fleet_setting_event_shown").fetchall()
        _no_secret(json.dumps(events, default=str), "fleet_setting_event_shown")
        _no_secret(json.dumps(conn.execute("SELECT * FROM occurrence_args_shown").fetchall()), "a")
    with _as(fleet.operator) as conn:  # a writer reads the stored values through the same views
        seen = json.dumps(conn.execute("SELECT * FROM task_secret_shown").fetchall())
        assert SECRETS["url_password"] in seen
        assert SECRETS["notify_header"] in seen

    # The old grant (SELECT on the whole table) gave every one of them away.
    with _as(fleet.admin_url) as conn:
        for table in roles.SECRET_COLUMNS:
            conn.execute(
                sql.SQL("GRANT SELECT ON {} TO {}").format(
                    sql.Identifier(table), sql.Identifier(fleet.names.reader)
                )
            )
    with _as(fleet.reader) as conn:
        dumped = json.dumps(
            [
                conn.execute("SELECT payload, notify_url, notify_headers FROM task").fetchall(),
                conn.execute("SELECT args FROM occurrence").fetchall(),
                conn.execute("SELECT value FROM fleet_setting").fetchall(),
            ]
        )
    assert all(value in dumped for value in SECRETS.values())
    fleet.grant()  # and `db roles` takes it back
    _refused(fleet.reader, "SELECT payload FROM task")


def test_every_reader_command_works_as_the_reader_and_shows_no_secret(
    fleet: RoleFleet, cli: Any, tmp_path: Path
) -> None:
    """Fails with the old whole-table grant (checked: `tasks list --json` printed the URL's
    path token), and with a reader statement that selects a secret column itself
    (`permission denied`)."""
    occurrence = _define(fleet, cli, tmp_path)
    reader = fleet.reader
    reads = [
        ("status",),
        ("status", "--json"),
        ("tasks", "list"),
        ("tasks", "list", "--json"),
        ("tasks", "list", "--json", "--show-secrets"),
        ("tasks", "show", "hook", "--json"),
        ("tasks", "show", "hook", "--show-secrets"),
        ("tasks", "next", "hook"),
        ("tasks", "health", "--json"),
        ("tasks", "export", "--source", "team"),
        ("runs", "list", "--json"),
        ("runs", "list", "--task", "hook", "--json"),
        ("runs", "show", str(occurrence), "--occurrence", "--json"),
        ("config", "show", "--json"),
        ("actions", "--json"),
        ("audit",),
        ("migrate", "--check"),
    ]
    outputs = {}
    for step in reads:
        result = cli(*step, url=reader)
        assert result.code == 0, (step, result.err)
        _no_secret(result.out + result.err, step)
        outputs[step] = result.out
    shown = json.loads(outputs[("tasks", "show", "hook", "--json")])
    assert shown["target"] == "https://api.example.com/***"
    assert shown["headers"] == {"Authorization": "***", "X-Plain": "***"}
    assert shown["notify_url"] == "https://hooks.example.com/***"
    assert shown["notify_headers"] == {"X-Token": "***"}
    settings = json.loads(outputs[("config", "show", "--json")])
    assert settings["notify-url"] == "https://fleet.example.com/***"
    assert settings["notify-headers"] == {"Authorization": "***"}
    assert json.loads(outputs[("runs", "list", "--json")])[0]["args"] == {
        "api_key": "***",
        "region": "eu",
    }
    assert outputs[("tasks", "export", "--source", "team")].startswith(
        "# Exported by a database role that may not"
    )

    refused = cli("tasks", "export", "--include-secrets", url=reader)
    assert refused.code == 2
    assert refused.err.count("\n") == 1
    assert "may not read the tasks' secrets" in refused.err

    # The operator exports what is stored; applying the reader's masked export changes nothing.
    full = cli("tasks", "export", "--include-secrets", url=fleet.operator)
    assert full.code == 0
    assert not full.out.startswith("#")
    assert SECRETS["url_password"] in full.out
    assert SECRETS["notify_path"] in full.out
    exported = tmp_path / "exported.toml"
    exported.write_text(outputs[("tasks", "export", "--source", "team")])
    applied = cli("tasks", "apply", "-f", str(exported), "--json", url=fleet.operator)
    assert applied.code == 0, applied.err
    assert applied.json()["changes"] == []
    again = cli("tasks", "export", "--include-secrets", url=fleet.operator)
    assert again.out == full.out


def test_the_console_serves_every_page_as_the_reader_with_no_secret(
    fleet: RoleFleet, cli: Any, tmp_path: Path
) -> None:
    from starlette.testclient import TestClient

    from scheduler_daemon.client import Client
    from scheduler_daemon.console.app import build_app
    from scheduler_daemon.console.guard import Guard

    occurrence = _define(fleet, cli, tmp_path)
    with _as(fleet.reader) as conn:
        task_id = conn.execute("SELECT id FROM task WHERE name = 'hook'").fetchone()["id"]
    with Client(fleet.reader) as client:
        guard = Guard(writes=False, token=None, trust_header=None)
        with TestClient(build_app(client, guard), base_url=BASE) as http:
            for path in [
                "/",
                "/tasks",
                f"/tasks/{task_id}",
                "/running",
                "/audit",
                f"/occurrences/{occurrence}",
            ]:
                page = http.get(path)
                assert page.status_code == 200, (path, page.text[-500:])
                _no_secret(page.text, path)
            task_page = http.get(f"/tasks/{task_id}").text
            assert fleet.names.operator in task_page  # the action log's database role
            assert "api_key" in http.get(f"/occurrences/{occurrence}").text


def test_an_action_row_records_the_role_that_logged_in_whatever_the_writer_says(
    fleet: RoleFleet, cli: Any, tmp_path: Path
) -> None:
    """Fails on the build before (no session_role), and on a trigger that kept a supplied value
    as a column default would (checked: the forged 'postgres' was recorded)."""
    _define(fleet, cli, tmp_path)
    with _as(fleet.operator) as conn:
        conn.execute(
            "INSERT INTO operator_action (actor, action, source, session_role) "
            "VALUES ('mallory', 'pause', 'console', 'postgres')"
        )
        for statement in [
            "UPDATE operator_action SET session_role = 'postgres'",
            "DELETE FROM operator_action",
            "ALTER TABLE operator_action DISABLE TRIGGER USER",
        ]:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)  # type: ignore[arg-type]
    with _as(fleet.admin_url) as conn:
        rows = conn.execute(
            "SELECT actor, action, session_role FROM operator_action ORDER BY id"
        ).fetchall()
    operator = fleet.names.operator
    assert [(r["action"], r["session_role"]) for r in rows] == [
        ("trigger", operator),  # the CLI's, as the operator role
        ("pause", operator),  # not the 'postgres' it claimed
    ]
    assert rows[1]["actor"] == "mallory"  # the claimed actor is kept as claimed
    shown = cli("actions", "--json", url=fleet.reader)
    assert shown.code == 0, shown.err
    assert [(a["actor"], a["session_role"]) for a in shown.json()] == [
        ("mallory", operator),
        (rows[0]["actor"], operator),
    ]
    assert operator in cli("actions", url=fleet.reader).out


def test_the_readers_limits_hold_on_a_database_upgraded_from_0037(
    empty_database_url: str, cli: Any, tmp_path: Path
) -> None:
    url = empty_database_url
    _restore(url)  # a task with a notify URL, an operator action, fleet settings
    with _as(url) as conn:
        conn.execute("DELETE FROM instance")
        conn.execute(
            "UPDATE task SET notify_url = %s WHERE notify_url IS NOT NULL",
            (f"http://u:{SECRETS['url_password']}@127.0.0.1:9/hook",),
        )
    assert cli("migrate", url=url).code == 0
    with role_fleet(url) as fleet:
        _refused(fleet.reader, "SELECT notify_url FROM task")
        _refused(fleet.reader, "SELECT value FROM fleet_setting")
        for step in [
            ("tasks", "list", "--json"),
            ("config", "show"),
            ("status",),
            ("runs", "list"),
        ]:
            result = cli(*step, url=fleet.reader)
            assert result.code == 0, (step, result.err)
            _no_secret(result.out, step)
        shown = cli("tasks", "show", "recurring", "--json", url=fleet.reader).json()
        assert shown["notify_url"] == "http://127.0.0.1:9/***"
        actions = cli("actions", "--json", url=fleet.reader).json()
        assert [a["session_role"] for a in actions] == [None]  # recorded before the column


@pytest.mark.parametrize(
    "url",
    [
        "https://u:p@hooks.slack.com/services/T/B/X?x=1",
        "http://127.0.0.1:9/hook",
        "https://host",
        "HTTPS://Host:8443",
        "https://a@b@host/path",
        "not a url",
        "",
    ],
)
def test_the_databases_url_mask_is_the_one_apply_knows(db: Any, url: str) -> None:
    """`tasks apply` recognises a URL the reader exported by reader_masked_url; it must be the
    mask sd_masked_v1 applies."""
    masked = db.execute("SELECT sd_masked_v1('url', to_jsonb(%s::text)) #>> '{}' AS m", (url,))
    assert masked.fetchone()["m"] == reader_masked_url(url)


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "API-KEY",
        "db_password",
        "github_token",
        "Authorization",
        "session_id",
        "region",
        "count",
        "key",
        "user",
        "monkey",
    ],
)
def test_the_databases_secret_arguments_are_the_ones_output_masks(db: Any, key: str) -> None:
    masked = db.execute(
        "SELECT sd_masked_v1('args', jsonb_build_object(%s::text, 'v')) ->> %s::text AS v",
        (key, key),
    )
    assert (masked.fetchone()["v"] == "***") == is_secret_arg(key)
