"""The web console under test: a real `scheduler-daemon console` process on a free port, and a
browser-like HTTP session (cookies kept) that signs in and posts forms with their CSRF token."""

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx

from tests.support import free_port, wait_for

CSRF_INPUT = re.compile(r'name="csrf" value="([^"]+)"')
BASE = "http://127.0.0.1:8080"  # an in-process TestClient's base URL: a Host the console allows


class ConsoleProcess:
    """`scheduler-daemon console --port P ...` against `url`, its output in a file."""

    def __init__(
        self, url: str, log_dir: Path, *args: str, token: str | None = None, port: int = 0
    ) -> None:
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"console-{self.port}.log"
        env = {**os.environ, "SCHEDULER_DATABASE_URL": url}
        env.pop("SCHEDULER_CONSOLE_TOKEN", None)
        if token is not None:
            env["SCHEDULER_CONSOLE_TOKEN"] = token
        argv = [sys.executable, "-m", "scheduler_daemon", "--log-format", "json", "console"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [*argv, "--port", str(self.port), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )

    def wait_ready(self, timeout: float = 30.0) -> None:
        def answers() -> bool:
            assert self.proc.poll() is None, self.log()
            try:
                return httpx.get(self.base + "/", timeout=5).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(answers, timeout=timeout, message="the console to answer")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


class Browser:
    """An HTTP session that keeps cookies, fills each form's CSRF field from the page and sends
    its own `Origin`, as a browser would; over the ASGI app in-process (a TestClient) or a real
    server (httpx)."""

    def __init__(self, http: Any) -> None:
        self.http = http
        self.origin = str(http.base_url).rstrip("/")

    def get(self, path: str) -> Any:
        return self.http.get(path)

    def csrf(self, path: str = "/login") -> str:
        """The CSRF token the page at `path` puts in its forms (bound to this session); empty
        when it has none (a read-only console's)."""
        found = CSRF_INPUT.search(self.get(path).text)
        return found[1] if found else ""

    def post(
        self, path: str, data: dict[str, str] | None = None, *, csrf: bool = True, **headers: str
    ) -> Any:
        """A form post as the browser sends it (`Origin` this console's; `headers` added)."""
        form = dict(data or {})
        if csrf:  # from the page the form is on: /login's own, an action's on its object's page
            form["csrf"] = self.csrf(path if path == "/login" else path.rsplit("/", 1)[0] or "/")
        sent = {"Origin": self.origin, **{k.replace("_", "-"): v for k, v in headers.items()}}
        return self.http.post(path, data=form, headers=sent)

    def sign_in(self, token: str) -> Any:
        return self.post("/login", {"token": token})

    def sign_out(self) -> Any:
        return self.post("/logout")


def message(html: str) -> str:
    """The one line an action's page shows."""
    found = re.search(r'id="message">([^<]*)<', html)
    assert found, html
    return unescape(found[1])


def unescape(text: str) -> str:
    import html

    return html.unescape(text)


class Scripts(HTMLParser):
    """Every <script> element of a page, with its src."""

    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self.sources.append(dict(attrs).get("src"))


def script_sources(html: str) -> list[str | None]:
    parser = Scripts()
    parser.feed(html)
    return parser.sources
