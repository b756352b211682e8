"""The console's defences in a real browser (headless chromium; issue 46, ADR 0030).

A neighbour on another port of the console's host (127.0.0.1:OTHER) fetches what the console
gives any visitor (a session cookie and its form's CSRF token), then serves a page that tosses
those cookies into the browser (its `Set-Cookie`: ports are not a cookie boundary, and SameSite
calls another port the same site) and auto-posts a trigger to the console. With the operator
signed in, it is refused, and refused again with the Origin check turned off in the test (the
session-bound CSRF token holds alone). On the old code (35b499e) the same page, tossing the
`sd_csrf` cookie it was given, queued the trigger as the signed-in operator: checked by serving
that commit's `console.app` with this module's `Served`, `Neighbour` and `neighbour_page` in
chromium (`occurrence 1 queued`, recorded as `console-token@127.0.0.1`; the same run showed
`rebind.test` reading the task list, and a Bearer-only POST refused with 403).

Also: a rebinding site's name (chromium's resolver maps `rebind.test` to 127.0.0.1) gets the
one-line refusal, not a page; a viewer signs out and is signed out.
"""

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.support import free_port, query, shell_task, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.browser]
TOKEN = "browser-defences-token-51c"
CSRF_INPUT = re.compile(r'name="csrf" value="([^"]+)"')


class Served:
    """An ASGI app served by uvicorn in a thread on a free loopback port."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_config=None, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.server.started, message="the console to listen")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def neighbour_page(console_base: str, action: str, cookie_path: str) -> tuple[list[str], str]:
    """What the neighbour serves: it gets, as any visitor, the console's cookies and the sign-in
    form's CSRF token; its page tosses the cookies (its own `Set-Cookie`, at `cookie_path`: a
    response may overwrite an HttpOnly cookie, a script may not) and auto-posts `action` with
    the token."""
    visit = httpx.get(console_base + "/login")
    token = CSRF_INPUT.search(visit.text)
    tossed = [f"{name}={value}; Path={cookie_path}" for name, value in visit.cookies.items()]
    page = f"""<!doctype html><html><body>
<form id="f" method="post" action="{console_base}{action}">
<input type="hidden" name="csrf" value="{token[1] if token else ""}"></form>
<script>document.getElementById("f").submit();</script></body></html>"""
    return tossed, page


class Neighbour:
    """The page on another port of the console's host: `self.page` with `self.cookies` set."""

    def __init__(self) -> None:
        self.cookies: list[str] = []
        self.page = ""
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = owner.page.encode()
                self.send_response(200)
                for cookie in owner.cookies:
                    self.send_header("set-cookie", cookie)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _message(driver: Any) -> str:
    return (
        WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "message"))[0].text.strip()
    )


def _sign_in(driver: Any, base: str) -> None:
    driver.get(base + "/login")
    driver.find_element(By.NAME, "token").send_keys(TOKEN)
    driver.find_element(By.XPATH, "//button[normalize-space()='Sign in']").click()
    WebDriverWait(driver, 20).until(lambda d: d.current_url == base + "/")
    assert driver.find_elements(By.ID, "sign-out")


@pytest.fixture
def console(database_url: str) -> Iterator[Any]:
    """`console(**guard_options)`: the console's app over a real database, served by uvicorn."""
    from scheduler_daemon.client import Client
    from scheduler_daemon.console.app import build_app
    from scheduler_daemon.console.guard import Guard

    started: list[tuple[Served, Client]] = []

    def start(**options: Any) -> Served:
        client = Client(database_url)
        guard = Guard(writes=True, token=TOKEN, trust_header=None, **options)
        served = Served(build_app(client, guard))
        started.append((served, client))
        return served

    yield start
    for served, client in started:
        served.stop()
        client.close()


@pytest.fixture
def neighbour() -> Iterator[Neighbour]:
    page = Neighbour()
    yield page
    page.stop()


@pytest.mark.parametrize("check_origin", [True, False])
def test_a_neighbour_on_another_port_cannot_trigger_as_the_signed_in_operator(
    browser, console, neighbour, client, database_url, *, check_origin: bool
) -> None:
    task = shell_task(client, "job")
    web = console(check_origin=check_origin)
    _sign_in(browser, web.base)
    action = f"/tasks/{task.id}/trigger"
    for cookie_path in ("/", "/tasks/"):  # overwrite the operator's cookie, or go before it
        neighbour.cookies, neighbour.page = neighbour_page(web.base, action, cookie_path)
        browser.get(neighbour.base + "/")
        WebDriverWait(browser, 20).until(lambda d: d.current_url.startswith(web.base))
        line = _message(browser)
        browser.shot(f"tossed-{cookie_path.strip('/') or 'root'}-origin-{check_origin}")
        if check_origin:
            assert line == "refused: this request came from another site's page, not the console's"
        elif cookie_path == "/":  # the operator's session cookie was replaced: nobody
            assert line == "refused: sign in with the console token first"
        else:  # the operator's session is sent after the tossed one; the token is not its own
            assert line == "refused: the form's CSRF token is missing or wrong; reload the page"
        assert query(database_url, "SELECT id FROM occurrence") == []
        assert query(database_url, "SELECT id FROM operator_action") == []
        _sign_in(browser, web.base)  # again, in case the tossed cookie replaced the session
    # the operator's own button still works
    browser.get(web.base + f"/tasks/{task.id}")
    browser.find_element(By.XPATH, "//button[normalize-space()='Trigger now']").click()
    assert _message(browser) == "occurrence 1 queued"


def test_a_rebinding_sites_name_gets_one_line_and_no_page(browser, console, client) -> None:
    shell_task(client, "secret-looking-task")
    web = console()
    browser.get(f"http://rebind.test:{web.port}/tasks")  # resolved to 127.0.0.1 (conftest)
    text = browser.find_element(By.TAG_NAME, "body").text.strip()
    assert text == "refused: this console does not answer to that Host (see --allowed-host)"
    assert "secret-looking-task" not in browser.page_source
    browser.get(web.base + "/tasks")
    assert "secret-looking-task" in browser.page_source  # its own name: served


def test_a_viewer_signs_out_and_is_signed_out(browser, console, client, database_url) -> None:
    task = shell_task(client, "job")
    web = console()
    _sign_in(browser, web.base)
    held = browser.get_cookie("sd_session")["value"]
    browser.find_element(By.ID, "sign-out").click()
    WebDriverWait(browser, 20).until(lambda d: not d.find_elements(By.ID, "sign-out"))
    assert browser.find_element(By.LINK_TEXT, "sign in")
    assert browser.get_cookie("sd_session")["value"] != held
    browser.shot("signed-out")
    browser.get(web.base + f"/tasks/{task.id}")
    browser.find_element(By.XPATH, "//button[normalize-space()='Trigger now']").click()
    assert _message(browser) == "refused: sign in with the console token first"
    # the session is dead on the server: its old cookie, put back, is nobody
    browser.delete_cookie("sd_session")
    browser.add_cookie({"name": "sd_session", "value": held, "path": "/"})
    browser.get(web.base + f"/tasks/{task.id}")
    assert not browser.find_elements(By.ID, "sign-out")
    browser.find_element(By.XPATH, "//button[normalize-space()='Trigger now']").click()
    assert _message(browser) == "refused: sign in with the console token first"
    assert query(database_url, "SELECT id FROM occurrence") == []
