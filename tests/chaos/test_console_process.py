"""The real `scheduler-daemon console` process: it serves the pages, refuses a POST without the
CSRF token or the token and changes no row, acts once signed in; a foreign Host is refused and
X-Forwarded-For names the client only from a proxy named by --forwarded-allow-ips; it refuses
`--writes` with no operator (exit 2), a schema without `operator_action` (exit 4) and an address
in use (exit 11)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from scheduler_daemon.cli.base import EXIT_BAD_INPUT, EXIT_CONSOLE_UNAVAILABLE, EXIT_SCHEMA_BEHIND
from tests.console_process import Browser, ConsoleProcess, message
from tests.support import EVERY_MINUTE, query

pytestmark = pytest.mark.slow
TOKEN = "process-token-91ab"


def test_a_real_console_process_refuses_then_acts_once_signed_in(
    database_url, cli, tmp_path: Path
) -> None:
    cli("tasks", "add", "job", *EVERY_MINUTE)
    console = ConsoleProcess(database_url, tmp_path, "--writes", token=TOKEN)
    try:
        console.wait_ready()
        with httpx.Client(base_url=console.base, follow_redirects=False) as http:
            browser = Browser(http)
            page = browser.get("/tasks")
            assert page.status_code == 200
            assert ">job</a>" in page.text
            assert page.headers["content-security-policy"].startswith("default-src 'self'")
            assert browser.post("/tasks/1/trigger", csrf=False).status_code == 403
            assert browser.post("/tasks/1/trigger").status_code == 401
            assert query(database_url, "SELECT id FROM occurrence") == []
            assert browser.sign_in(TOKEN).status_code == 303
            done = browser.post("/tasks/1/trigger")
            assert message(done.text) == "occurrence 1 queued"
        rows = query(database_url, "SELECT actor, action, source FROM operator_action")
        assert rows == [
            {"actor": "console-token@127.0.0.1", "action": "trigger", "source": "console"}
        ]
        assert TOKEN not in console.log()
    finally:
        console.stop()
    assert '"console_started"' in console.log()


def test_x_forwarded_for_names_the_client_only_from_a_named_proxy(
    database_url, cli, tmp_path: Path
) -> None:
    """Fails on the old code: uvicorn's default proxy headers believed any local client, so a
    local script's X-Forwarded-For set the address recorded in the actor. Also over the real
    server: a foreign Host is refused (421) before anything is read."""
    cli("tasks", "add", "job", *EVERY_MINUTE)
    spoof = {"Authorization": f"Bearer {TOKEN}", "X-Forwarded-For": "203.0.113.9"}
    for action, args in (("pause", ()), ("resume", ("--forwarded-allow-ips", "127.0.0.1"))):
        console = ConsoleProcess(database_url, tmp_path, "--writes", *args, token=TOKEN)
        try:
            console.wait_ready()
            rebound = httpx.get(console.base + "/", headers={"Host": "rebind.example"})
            assert rebound.status_code == 421
            done = httpx.post(f"{console.base}/tasks/1/{action}", headers=spoof)
            assert done.status_code == 200, done.text
        finally:
            console.stop()
    rows = query(database_url, "SELECT actor, action FROM operator_action ORDER BY id")
    assert rows == [
        {"actor": "console-token@127.0.0.1", "action": "pause"},  # the header ignored
        {"actor": "console-token@203.0.113.9", "action": "resume"},  # from the named proxy
    ]


def test_writes_without_an_operator_and_a_port_in_use_are_refused(database_url) -> None:
    argv = [sys.executable, "-m", "scheduler_daemon", "--database-url", database_url, "console"]
    env_free = {k: v for k, v in os.environ.items() if k != "SCHEDULER_CONSOLE_TOKEN"}
    no_operator = subprocess.run(
        [*argv, "--writes"], check=False, capture_output=True, text=True, timeout=60, env=env_free
    )
    assert no_operator.returncode == EXIT_BAD_INPUT
    assert no_operator.stderr.strip().splitlines() == [
        "error: --writes needs an operator: --token-file, SCHEDULER_CONSOLE_TOKEN or --trust-header"
    ]
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        in_use = subprocess.run(
            [*argv, "--port", str(port)],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            env=env_free,
        )
    assert in_use.returncode == EXIT_CONSOLE_UNAVAILABLE
    assert (
        in_use.stderr.strip() == f"error: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


def test_a_schema_behind_this_build_is_refused_before_listening(empty_database_url) -> None:
    # An empty database: the only schema behind the baseline (issue 45 squashed 0001-0037).
    behind = subprocess.run(
        [sys.executable, "-m", "scheduler_daemon", "--database-url", empty_database_url,
         "console", "--port", "0"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert behind.returncode == EXIT_SCHEMA_BEHIND
    assert behind.stderr.startswith("error: the database schema is at nothing")
    assert "run `scheduler-daemon migrate`" in behind.stderr
