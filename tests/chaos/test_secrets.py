"""Secrets planted in http tasks (headers, a URL password) reach the webhook, and appear in no log
line of a real daemon run at debug level, in no run row, and in no command output without
--show-secrets."""

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support import free_port, query, wait_for

pytestmark = pytest.mark.slow
SECRETS = {
    "auth": "planted-bearer-7f3a",
    "key": "planted-apikey-91c2",
    "cookie": "planted-cookie-5d0e",
    "proxy": "planted-proxy-b44f",
    "url": "planted-urlpw-2a9c",
}
NO_PROXY = {"no_proxy": "*", "NO_PROXY": "*"}  # loopback only, never through a proxy


class Webhook(ThreadingHTTPServer):
    daemon_threads = True
    received: list[dict[str, str]]

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class Handler(BaseHTTPRequestHandler):
    server: Webhook

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append({"path": self.path, **dict(self.headers)})
        status = 500 if self.path == "/fail" else 200
        body = b"not today" if status == 500 else b"done"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    server = Webhook(("127.0.0.1", 0), Handler)
    server.received = []
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_planted_secrets_never_reach_a_log_line_a_run_row_or_masked_output(
    spawn, cli, database_url, webhook: Webhook
) -> None:
    base = f"http://127.0.0.1:{webhook.port}"
    with_password = f"http://robot:{SECRETS['url']}@127.0.0.1"
    headers = [
        "--header",
        f"Authorization: Bearer {SECRETS['auth']}",
        "--header",
        f"X-Api-Key: {SECRETS['key']}",
        "--header",
        f"Cookie: sid={SECRETS['cookie']}; theme=dark",
    ]
    tasks = {
        "ok": ["--http", f"{base}/ok", *headers],
        "fails": ["--http", f"{base}/fail", *headers],
        "basic": ["--http", f"{with_password}:{webhook.port}/basic"],
        "refused": [
            "--http",
            f"{with_password}:{free_port()}/gone",
            "--header",
            f"Proxy-Authorization: Basic {SECRETS['proxy']}",
        ],
    }
    outputs = []
    for name, options in tasks.items():
        added = cli("tasks", "add", name, "--every", "1h", *options, "--json")
        assert added.code == 0, added.err
        outputs.append(added.out)
    daemon = spawn(database_url, "secretive", env={"SCHEDULER_LOG_LEVEL": "debug", **NO_PROXY})
    try:
        daemon.instance_id()
        for name in tasks:
            cli("tasks", "trigger", name)
        runs = wait_for(
            lambda: (
                len(r := query(database_url, "SELECT * FROM run WHERE status <> 'running'"))
                == len(tasks)
                and r
            ),
            message="every http run to finish",
        )
    finally:
        assert daemon.stop() == 0, daemon.log()

    by_path = {r["path"]: r for r in webhook.received}
    assert by_path["/ok"]["Authorization"] == f"Bearer {SECRETS['auth']}"
    assert by_path["/ok"]["X-Api-Key"] == SECRETS["key"]
    assert by_path["/fail"]["Cookie"] == f"sid={SECRETS['cookie']}; theme=dark"
    basic = base64.b64encode(f"robot:{SECRETS['url']}".encode()).decode()
    assert by_path["/basic"]["Authorization"] == f"Basic {basic}"
    assert sorted(r["status"] for r in runs) == ["failed", "failed", "success", "success"]

    lines = daemon.log().splitlines()
    assert sum('"run_finished"' in line for line in lines) == len(tasks)
    outputs += [
        cli("tasks", "list", "--json").out,
        cli("tasks", "list").out,
        cli("tasks", "show", "ok").out,
        cli("runs", "list", "--json").out,
        json.dumps(runs, default=str),
    ]
    for secret in SECRETS.values():
        leaked = [line for line in lines if secret in line]
        assert leaked == [], f"{secret} in the log: {leaked}"
        assert not [o for o in outputs if secret in o], f"{secret} in an output"
    shown = cli("tasks", "list", "--show-secrets", "--json").out
    assert all(secret in shown for secret in SECRETS.values())
