"""An http(s) URL is checked where it enters by what will parse it (issue 44, KNOWN-FAILURES 39):
`tasks add`, `tasks update`, `tasks apply`, `config set notify-url` and the Client refuse a URL
that `urllib.parse.urlsplit` and `.port` cannot read, with one line, exit 2, nothing written.

On the old code each of these URLs passed a prefix check (`^https?://[^\\s/]+`) and was stored;
`http://[::1/hook` then raised inside every launch pass of the daemon."""

from datetime import timedelta
from pathlib import Path

import pytest

from scheduler_daemon.domain.argument import InvalidArgument
from scheduler_daemon.domain.task import InvalidTask, TaskSpec

HOSTILE = [
    ("http://[::1/hook", "Invalid IPv6 URL"),
    ("http://a b/h", "whitespace"),
    ("http://hooks.example:99999/h", "Port out of range"),
    ("https://hooks.example:0/h", "port of 1 to 65535"),
    ("http://:8080/h", "needs a host"),
]
IDS = [url for url, _ in HOSTILE]
FINE = {"name": "fine", "executor": "shell", "target": "true", "every": timedelta(hours=1)}


def _one_line_exit_2(result, message: str) -> None:
    assert result.code == 2, result
    assert message in result.err
    assert result.err.startswith("error: ")
    assert result.err.count("\n") == 1
    assert result.out == ""


@pytest.mark.parametrize(("url", "message"), HOSTILE, ids=IDS)
def test_tasks_add_refuses_an_http_target_that_does_not_parse(cli, counts, url, message) -> None:
    before = counts()
    _one_line_exit_2(cli("tasks", "add", "hook", "--every", "1s", "--http", url), message)
    assert counts() == before


@pytest.mark.parametrize(("url", "message"), HOSTILE, ids=IDS)
def test_tasks_add_refuses_a_notify_url_that_does_not_parse(cli, counts, url, message) -> None:
    before = counts()
    result = cli("tasks", "add", "n", "--every", "1h", "--command", "true", "--notify", url)
    _one_line_exit_2(result, message)
    assert counts() == before


@pytest.mark.parametrize(("url", "message"), HOSTILE, ids=IDS)
def test_tasks_update_refuses_an_http_target_that_does_not_parse(cli, db, url, message) -> None:
    assert cli("tasks", "add", "hook", "--every", "1h", "--http", "http://127.0.0.1:9/").code == 0
    before = db.execute("SELECT payload, updated_at FROM task").fetchone()
    _one_line_exit_2(cli("tasks", "update", "hook", "--http", url), message)
    assert db.execute("SELECT payload, updated_at FROM task").fetchone() == before


@pytest.mark.parametrize(("url", "message"), HOSTILE, ids=IDS)
def test_config_set_notify_url_refuses_a_url_that_does_not_parse(cli, counts, url, message) -> None:
    before = counts()
    _one_line_exit_2(cli("config", "set", "notify-url", url), message)
    assert counts() == before


@pytest.mark.parametrize(("url", "message"), HOSTILE, ids=IDS)
def test_tasks_apply_refuses_a_file_whose_url_does_not_parse(
    cli, counts, tmp_path: Path, url, message
) -> None:
    path = tmp_path / "tasks.toml"
    path.write_text(
        '[fine]\nevery = "1h"\ncommand = "true"\n\n'
        f'[hook]\nevery = "1s"\nhttp = "{url}"\n\n'
        f'[told]\nevery = "1h"\ncommand = "true"\nnotify = "{url}"\n'
    )
    before = counts()
    result = cli("tasks", "apply", "-f", str(path), "--source", "deploy/tasks.toml")
    _one_line_exit_2(result, message)
    assert counts() == before  # not even the fine task: a file applies whole or not at all


@pytest.mark.parametrize(("url", "message"), HOSTILE, ids=IDS)
def test_the_client_refuses_a_url_that_does_not_parse(client, counts, url, message) -> None:
    before = counts()
    spec = TaskSpec(name="hook", executor="http", target=url, every=timedelta(seconds=1))
    with pytest.raises(InvalidTask, match="--http") as caught:
        client.add_task(spec)
    assert message in str(caught.value)
    with pytest.raises(InvalidTask, match="--notify") as told:
        client.add_task(TaskSpec(**{**FINE, "notify_url": url}))
    assert message in str(told.value)
    with pytest.raises(InvalidArgument) as refused:
        client.set_fleet_setting("notify-url", url, updated_by="test")
    assert message in str(refused.value)
    assert counts() == before


def test_the_client_refuses_an_update_to_a_url_that_does_not_parse(client, db) -> None:
    client.add_task(TaskSpec(**FINE))
    before = db.execute("SELECT payload, notify_url, updated_at FROM task").fetchone()
    for url, message in HOSTILE:
        with pytest.raises(InvalidTask, match="--http") as caught:
            client.update_task("fine", executor="http", target=url)
        assert message in str(caught.value)
        with pytest.raises(InvalidTask, match="--notify"):
            client.update_task("fine", notify_url=url)
    assert db.execute("SELECT payload, notify_url, updated_at FROM task").fetchone() == before


def test_a_url_with_a_port_an_ipv6_host_and_user_info_is_still_accepted(cli) -> None:
    for i, url in enumerate(
        ["https://hooks.example:8443/h?x=1", "http://[::1]:8080/hook", "https://u:pw@h.example/"]
    ):
        assert cli("tasks", "add", f"ok{i}", "--every", "1h", "--http", url).code == 0
    assert cli("config", "set", "notify-url", "http://[::1]:65535/n").code == 0
