"""The console's defences (issue 46, ADR 0030) over the real ASGI app and a real database, each
shown holding alone: a cookie tossed from another port of the host cannot drive a signed-in
browser (the Origin check refuses it, and with that check off the session-bound CSRF token
still does); a valid token does not save a cross-origin post; a script acts with a Bearer header
in one request; a foreign Host is refused before any page; sign-out kills the session on the
server, a session ends after its lifetime, a sign-in takes a new session id; sign-ins are
rate-limited per client; the CLI refuses a short token, a wildcard bind without
--allowed-host, a wildcard host and a proxy that is not an address (exit 2, one line)."""

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from scheduler_daemon.cli.base import EXIT_BAD_INPUT
from scheduler_daemon.client import Client
from scheduler_daemon.console.app import build_app
from scheduler_daemon.console.guard import SESSION_COOKIE, Guard
from scheduler_daemon.console.host import allowed_hosts
from scheduler_daemon.console.session import SIGN_IN_BURST, SIGN_IN_EVERY
from tests.console_process import BASE, Browser, message
from tests.support import shell_task

TOKEN = "defences-token-3f9a1c"
NEIGHBOUR = "http://127.0.0.1:18999"  # another port of the console's host


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def console(database_url: str) -> Iterator[Any]:
    """`console(**guard_options) -> (make_browser, guard)`: one app; each browser its own
    cookie jar (and, with `client=(host, port)`, its own address)."""
    made: list[Any] = []

    def start(**options: Any) -> Any:
        client = Client(database_url)
        options = {"writes": True, "token": TOKEN, "trust_header": None, **options}
        guard = Guard(**options)
        app = build_app(client, guard)

        def browser(**kw: Any) -> Browser:
            http = TestClient(app, base_url=kw.pop("base_url", BASE), follow_redirects=False, **kw)
            made.append(http)
            return Browser(http)

        made.append(client)
        return browser, guard

    yield start
    for thing in made:
        thing.close()


def _rows(db: Any) -> dict[str, int]:
    return {
        table: db.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"]
        for table in ("occurrence", "operator_action")
    }


def _toss(victim: Browser, attacker: Browser, path: str, *, replace: bool, **headers: str) -> Any:
    """The victim's browser posts the neighbour's auto-submitted form: the attacker's own
    session cookie tossed in (replacing the victim's, or sent before it, as a cookie set
    with a longer path is) and the CSRF token the console minted for that session."""
    token = attacker.csrf()
    theirs = attacker.http.cookies[SESSION_COOKIE]
    mine = victim.http.cookies[SESSION_COOKIE]
    cookie = f"{SESSION_COOKIE}={theirs}" + ("" if replace else f"; {SESSION_COOKIE}={mine}")
    with TestClient(victim.http.app, base_url=BASE) as raw:  # no jar: the header as the browser
        return raw.post(path, data={"csrf": token}, headers={"Cookie": cookie, **headers})


def test_a_cookie_tossed_from_another_port_cannot_drive_a_signed_in_browser(
    console, client, db
) -> None:
    """Fails on the old code (35b499e): there the neighbour fetched a `sd_csrf` cookie from
    the console, tossed it into the operator's browser and posted the same value in its form;
    the guard checked only that this process had minted it, and the trigger was queued and
    recorded as the signed-in operator. Now each defence refuses it alone."""
    task = shell_task(client, "job")
    path = f"/tasks/{task.id}/trigger"
    for check_origin in (True, False):
        browser, _ = console(check_origin=check_origin)
        victim, attacker = browser(), browser()
        assert victim.sign_in(TOKEN).status_code == 303
        before = _rows(db)
        for replace in (False, True):
            for headers in ({"Origin": NEIGHBOUR}, {"Sec-Fetch-Site": "same-site"}):
                page = _toss(victim, attacker, path, replace=replace, **headers)
                assert page.status_code in (401, 403), page.text
                line = message(page.text)
                if check_origin:
                    assert (
                        line
                        == "refused: this request came from another site's page, not the console's"
                    )
                elif replace:  # the victim's session is not sent: the neighbour's is nobody
                    assert line == "refused: sign in with the console token first"
                else:  # the victim's session is sent; the token is not its own
                    assert "CSRF token is missing or wrong" in line
        # the old attack word for word: a `sd_csrf` cookie and the same value in the form
        with TestClient(victim.http.app, base_url=BASE) as raw:
            mine = victim.http.cookies[SESSION_COOKIE]
            old = raw.post(
                path,
                data={"csrf": "nonce.mac"},
                headers={"Cookie": f"sd_csrf=nonce.mac; {SESSION_COOKIE}={mine}"},
            )
        assert old.status_code == 403
        assert _rows(db) == before
        done = message(victim.post(path).text)  # still signed in: its own form goes through
        assert done.startswith("occurrence "), done
        assert done.endswith(" queued"), done
        db.execute("DELETE FROM operator_action; DELETE FROM occurrence")


def test_a_valid_csrf_token_does_not_save_a_post_from_another_origin(console, client, db) -> None:
    """The Origin check alone: the victim's own token (as if it had leaked) posted from the
    neighbour's page, or with no Origin nor Sec-Fetch-Site, is refused. Fails on the old code,
    which looked at neither header."""
    task = shell_task(client, "job")
    browser, _ = console()
    victim = browser()
    victim.sign_in(TOKEN)
    token = victim.csrf(f"/tasks/{task.id}")
    path = f"/tasks/{task.id}/pause"
    for headers, line in [
        ({"Origin": NEIGHBOUR}, "another site's page"),
        ({"Origin": "null"}, "another site's page"),
        ({"Sec-Fetch-Site": "cross-site", "Origin": BASE}, "another site's page"),
        ({}, "no Origin or Sec-Fetch-Site header"),
    ]:
        page = victim.http.post(path, data={"csrf": token}, headers=headers)
        assert page.status_code == 403, headers
        assert line in message(page.text), headers
    assert _rows(db) == {"occurrence": 0, "operator_action": 0}
    assert db.execute("SELECT paused FROM task").fetchone()["paused"] is False
    same = victim.http.post(path, data={"csrf": token}, headers={"Sec-Fetch-Site": "same-origin"})
    assert message(same.text) == "task 'job' paused"


def test_a_script_triggers_with_a_bearer_header_in_one_request(console, client, db) -> None:
    """Fails on the old code: the CSRF check ran before the credential, so the script got 403
    unless it first fetched the cookie and a form's token."""
    task = shell_task(client, "job")
    browser, _ = console()
    script = browser().http  # no cookie, no form token, no Origin: curl's request
    done = script.post(f"/tasks/{task.id}/trigger", headers={"Authorization": f"Bearer {TOKEN}"})
    assert done.status_code == 200, done.text
    assert message(done.text) == "occurrence 1 queued"
    row = db.execute("SELECT actor, action FROM operator_action").fetchone()
    assert row == {"actor": "console-token@testclient", "action": "trigger"}
    # a Bearer the page of another origin sent (it cannot without CORS; refused anyway)
    foreign = script.post(
        f"/tasks/{task.id}/pause",
        headers={"Authorization": f"Bearer {TOKEN}", "Origin": NEIGHBOUR},
    )
    assert foreign.status_code == 403
    wrong = script.post(f"/tasks/{task.id}/pause", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 403
    assert db.execute("SELECT paused FROM task").fetchone()["paused"] is False


def test_a_foreign_host_is_refused_before_any_page_or_action(console, client, db) -> None:
    """A DNS-rebinding site's name in Host: 421, one line, nothing read or written. Fails on
    the old code, which served every page under any Host."""
    task = shell_task(client, "secret-task-name")
    browser, _ = console()
    rebound = browser(base_url="http://rebind.example:8080")
    for page in (rebound.get("/"), rebound.get(f"/tasks/{task.id}"), rebound.get("/static/x")):
        assert page.status_code == 421
        assert (
            page.text == "refused: this console does not answer to that Host (see --allowed-host)\n"
        )
    act = rebound.http.post(
        f"/tasks/{task.id}/trigger", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert act.status_code == 421
    assert _rows(db)["occurrence"] == 0
    # behind --trust-header the rebinding page could set the header itself and act as anyone
    proxied, _ = console(token=None, trust_header="X-Forwarded-User")
    mallory = proxied(base_url="http://rebind.example:8080")
    mallory.http.headers["X-Forwarded-User"] = "mallory"
    assert mallory.post(f"/tasks/{task.id}/pause").status_code == 421
    assert db.execute("SELECT paused FROM task").fetchone()["paused"] is False
    assert _rows(db)["operator_action"] == 0
    for base in ("http://localhost:8080", "http://[::1]:8080", BASE):
        assert browser(base_url=base).get(f"/tasks/{task.id}").status_code == 200, base
    # a wildcard bind with --allowed-host: that name, and the local ones
    named, _ = console(allowed_hosts=allowed_hosts("0.0.0.0", ("console.example.com",)))
    assert named(base_url="https://console.example.com").get("/").status_code == 200
    assert named(base_url="http://rebind.example").get("/").status_code == 421


def test_a_viewer_signs_out_and_the_session_is_dead_on_the_server(console, client, db) -> None:
    """Fails on the old code: it had no sign-out, and its session cookie (an HMAC of the
    token) was valid for the process's life wherever it was replayed."""
    task = shell_task(client, "job")
    browser, _ = console()
    viewer = browser()
    viewer.sign_in(TOKEN)
    held = viewer.http.cookies[SESSION_COOKIE]
    assert 'id="sign-out"' in viewer.get("/").text
    refused = viewer.post("/logout", csrf=False)
    assert refused.status_code == 403  # sign-out is a write: its CSRF token
    assert 'id="sign-out"' in viewer.get("/").text
    assert viewer.sign_out().status_code == 303
    assert viewer.http.cookies[SESSION_COOKIE] != held
    page = viewer.get("/").text
    assert 'id="sign-out"' not in page
    assert 'href="/login">sign in' in page
    assert viewer.post(f"/tasks/{task.id}/trigger").status_code == 401
    # the old cookie, replayed (with a token minted for it), is nobody now
    replay = browser()
    replay.http.cookies.set(SESSION_COOKIE, held)
    again = replay.post(f"/tasks/{task.id}/trigger")
    assert again.status_code == 401
    assert message(again.text) == "refused: sign in with the console token first"
    assert _rows(db)["occurrence"] == 0


def test_a_session_ends_after_its_lifetime(console, client, db) -> None:
    clock = Clock()
    task = shell_task(client, "job")
    browser, _ = console(session_lifetime=600, clock=clock)
    viewer = browser()
    signed = viewer.sign_in(TOKEN)
    assert "Max-Age=600" in signed.headers["set-cookie"]
    clock.now += 599
    assert message(viewer.post(f"/tasks/{task.id}/pause").text) == "task 'job' paused"
    clock.now += 1
    late = viewer.post(f"/tasks/{task.id}/resume")
    assert late.status_code == 401
    assert 'href="/login">sign in' in viewer.get("/").text
    assert db.execute("SELECT paused FROM task").fetchone()["paused"] is True


def test_a_sign_in_takes_a_new_session_id(console, client, db) -> None:
    """A session id planted before the sign-in (a neighbour's, tossed in) is never signed
    in: the sign-in gives the browser a new one. Fails on the old code's equivalent: its
    session value was the same for every sign-in, so whoever once held it acted."""
    task = shell_task(client, "job")
    browser, _ = console()
    attacker, victim = browser(), browser()
    attacker.get("/")
    planted = attacker.http.cookies[SESSION_COOKIE]
    victim.http.cookies.set(SESSION_COOKIE, planted, domain="127.0.0.1")  # as if tossed
    victim.sign_in(TOKEN)
    assert victim.http.cookies[SESSION_COOKIE] != planted
    assert attacker.post(f"/tasks/{task.id}/trigger").status_code == 401
    assert _rows(db)["occurrence"] == 0


def test_sign_ins_are_rate_limited_per_client(console, client) -> None:
    """Fails on the old code, which answered every guess (about 1,100 a second)."""
    clock = Clock()
    browser, _ = console(clock=clock)
    guesser = browser(client=("198.51.100.7", 40000))
    for _ in range(SIGN_IN_BURST):
        assert guesser.sign_in("wrong-guess").status_code == 401
    limited = guesser.sign_in(TOKEN)  # even the right token, while limited
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == str(int(SIGN_IN_EVERY))
    assert message(limited.text) == (
        f"refused: too many sign-in attempts; try again in {int(SIGN_IN_EVERY)} s"
    )
    assert browser(client=("198.51.100.8", 40000)).sign_in(TOKEN).status_code == 303
    clock.now += SIGN_IN_EVERY
    assert guesser.sign_in(TOKEN).status_code == 303


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--bind", "0.0.0.0"],
            "error: --bind 0.0.0.0 listens on every address: name the host names browsers use "
            "with --allowed-host (a DNS-rebinding site's name is refused)",
        ),
        (
            ["--bind", "::", "--allowed-host", "*"],
            "error: --allowed-host '*': name one host (a wildcard would let any site's name in)",
        ),
        (
            ["--allowed-host", "example.com:8080"],
            "error: --allowed-host 'example.com:8080': a host name only (no scheme, port or path)",
        ),
        (
            ["--forwarded-allow-ips", "*"],
            "error: --forwarded-allow-ips '*': not an IP address or network (name the proxy)",
        ),
    ],
)
def test_the_cli_refuses_an_unsafe_exposure(cli, monkeypatch, args: list[str], line: str) -> None:
    monkeypatch.setenv("SCHEDULER_CONSOLE_TOKEN", TOKEN)
    result = cli("console", "--port", "0", *args)
    assert (result.code, result.err.splitlines()) == (EXIT_BAD_INPUT, [line])


def test_the_cli_refuses_a_token_shorter_than_16_bytes(cli, monkeypatch, tmp_path) -> None:
    """Fails on the old code, which took a 1-character token."""
    monkeypatch.setenv("SCHEDULER_CONSOLE_TOKEN", "fifteen-bytes!!")
    result = cli("console", "--writes", "--port", "0")
    assert result.code == EXIT_BAD_INPUT
    assert result.err.splitlines() == [
        "error: the token from SCHEDULER_CONSOLE_TOKEN is 15 bytes; it needs at least 16 "
        "(openssl rand -hex 32 makes one)"
    ]
    short = tmp_path / "console-token"
    short.write_text("x\n")
    monkeypatch.delenv("SCHEDULER_CONSOLE_TOKEN")
    result = cli("console", "--writes", "--token-file", str(short))
    assert result.code == EXIT_BAD_INPUT
    assert result.err.splitlines() == [
        f"error: the token from --token-file {short} is 1 bytes; it needs at least 16 "
        "(openssl rand -hex 32 makes one)"
    ]
