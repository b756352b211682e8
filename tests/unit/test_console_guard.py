"""The console guard's rules without a server (ADR 0030): a CSRF token is bound to one session
(and, behind a proxy, to its user); a write must say it came from this origin unless it carries
a valid Bearer credential; a sign-in is rate-limited per client and its session ends; the Host
allow-list's parsing. A fake clock steps time."""

import pytest

from scheduler_daemon.console import session
from scheduler_daemon.console.guard import Guard, Refused
from scheduler_daemon.console.host import Origin, allowed_hosts, host_error, host_name, origin

TOKEN = "a-token-of-24-characters"
HOST = "127.0.0.1:8080"
SAME = {"host": HOST, "origin": f"http://{HOST}"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_csrf_token_holds_only_for_the_session_it_was_minted_for() -> None:
    # Fails on the guard that accepted any token this process minted (cookie == form): there
    # the other session's token was accepted, so a neighbour could plant its own.
    guard = Guard(writes=True, token=TOKEN, trust_header=None)
    mine, theirs = session.new_session_id(), session.new_session_id()
    token = guard.csrf_token(mine, SAME)
    guard.check_csrf(mine, SAME, token)
    other_process = Guard(writes=True, token=TOKEN, trust_header=None).csrf_token(mine, SAME)
    for session_id, given in [
        (theirs, token),  # a token planted from another session
        (mine, guard.csrf_token(theirs, SAME)),
        (mine, other_process),  # another process's key
        (mine, None),
        (mine, token.split(".")[0] + ".00"),
        (None, token),
    ]:
        with pytest.raises(Refused) as refused:
            guard.check_csrf(session_id, SAME, given)
        assert refused.value.status == 403


def test_behind_a_proxy_the_csrf_token_is_bound_to_the_proxys_user_too() -> None:
    guard = Guard(writes=True, token=None, trust_header="X-User")
    sid = session.new_session_id()
    alice = {**SAME, "x-user": "alice"}
    token = guard.csrf_token(sid, alice)
    guard.check_csrf(sid, alice, token)
    with pytest.raises(Refused):
        guard.check_csrf(sid, {**SAME, "x-user": "bob"}, token)


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        ({"sec-fetch-site": "same-origin"}, Origin.SAME),
        ({"sec-fetch-site": "none"}, Origin.SAME),  # the user's own navigation
        ({"sec-fetch-site": "same-site", "origin": f"http://{HOST}"}, Origin.FOREIGN),
        ({"sec-fetch-site": "cross-site"}, Origin.FOREIGN),
        ({"origin": f"http://{HOST}", "host": HOST}, Origin.SAME),
        ({"origin": f"https://{HOST}", "host": HOST}, Origin.SAME),  # TLS ended by a proxy
        ({"origin": "http://127.0.0.1:18999", "host": HOST}, Origin.FOREIGN),  # another port
        ({"origin": "http://evil.example", "host": HOST}, Origin.FOREIGN),
        ({"origin": "null", "host": HOST}, Origin.FOREIGN),
        ({"origin": f"http://{HOST}"}, Origin.FOREIGN),  # no Host to match
        ({"host": HOST}, Origin.UNSAID),
    ],
)
def test_where_a_request_says_it_came_from(headers: dict[str, str], said: Origin) -> None:
    assert origin(headers) == said


def test_a_write_needs_this_origin_and_the_token_or_a_valid_bearer() -> None:
    guard = Guard(writes=True, token=TOKEN, trust_header=None)
    sid = session.new_session_id()
    token = guard.csrf_token(sid, SAME)
    guard.check_write(SAME, sid, token)
    foreign = {"host": HOST, "origin": "http://127.0.0.1:18999"}
    for headers in (foreign, {"host": HOST}, {"host": HOST, "sec-fetch-site": "same-site"}):
        with pytest.raises(Refused) as refused:
            guard.check_write(headers, sid, token)  # a valid token does not save it
        assert refused.value.status == 403
    # with the Origin check off (tests only), the CSRF token still holds alone
    unchecked = Guard(writes=True, token=TOKEN, trust_header=None, check_origin=False)
    with pytest.raises(Refused, match="CSRF token"):
        unchecked.check_write(foreign, sid, unchecked.csrf_token(session.new_session_id(), SAME))
    # a valid Bearer: no CSRF token, no Origin needed; one that says another origin: refused
    bearer = {"host": HOST, "authorization": f"Bearer {TOKEN}"}
    guard.check_write(bearer, None, None)
    with pytest.raises(Refused):
        guard.check_write({**bearer, "origin": "http://evil.example"}, None, None)
    with pytest.raises(Refused):
        guard.check_write({"host": HOST, "authorization": "Bearer wrong"}, None, None)


def test_the_guard_names_the_operator_only_with_writes_and_a_credential() -> None:
    clock = Clock()
    guard = Guard(writes=True, token=TOKEN, trust_header="X-User", clock=clock)
    assert guard.actor(headers={"x-user": "bob"}, session_id=None, client_host="h") == "bob"
    signed_in = guard.sign_in(TOKEN)
    assert guard.actor(headers={}, session_id=signed_in, client_host="h") == "console-token@h"
    bearer = {"authorization": f"Bearer {TOKEN}"}
    assert guard.actor(headers=bearer, session_id=None, client_host="h") == "console-token@h"
    for sid in ("nope", session.new_session_id()):  # never signed in
        with pytest.raises(Refused):
            guard.actor(headers={"x-user": " "}, session_id=sid, client_host="h")
    with pytest.raises(Refused):
        guard.sign_in("wrong")
    read_only = Guard(writes=False, token=TOKEN, trust_header=None)
    with pytest.raises(Refused) as refused:
        read_only.actor(headers=bearer, session_id=None, client_host="h")
    assert "read-only" in str(refused.value)
    assert "secret-token" not in repr(Guard(writes=True, token="secret-token", trust_header=None))


def test_a_session_ends_after_its_lifetime_or_at_sign_out() -> None:
    clock = Clock()
    guard = Guard(writes=True, token=TOKEN, trust_header=None, session_lifetime=60, clock=clock)
    first, second = guard.sign_in(TOKEN), guard.sign_in(TOKEN)
    assert first != second
    clock.now += 59
    assert guard.sessions.signed_in(first)
    guard.sessions.end(first)
    assert not guard.sessions.signed_in(first)
    assert guard.sessions.signed_in(second)
    clock.now += 1
    assert not guard.sessions.signed_in(second)


def test_sign_ins_are_limited_per_client_then_refill() -> None:
    clock = Clock()
    guard = Guard(writes=True, token=TOKEN, trust_header=None, clock=clock)
    for _ in range(session.SIGN_IN_BURST):
        guard.limit_sign_in("10.0.0.1")
    with pytest.raises(Refused) as refused:
        guard.limit_sign_in("10.0.0.1")
    assert (refused.value.status, refused.value.retry_after) == (429, 10)
    guard.limit_sign_in("10.0.0.2")  # another client has its own
    clock.now += session.SIGN_IN_EVERY / 2
    with pytest.raises(Refused) as again:
        guard.limit_sign_in("10.0.0.1")
    assert again.value.retry_after == 5
    clock.now += session.SIGN_IN_EVERY / 2
    guard.limit_sign_in("10.0.0.1")


def test_host_names_and_the_allow_list() -> None:
    assert host_name("LocalHost:8080") == "localhost"
    assert host_name("[::1]:8080") == "::1"
    assert host_name("example.com") == "example.com"
    assert allowed_hosts("127.0.0.1", ()) == {"localhost", "127.0.0.1", "::1"}
    assert allowed_hosts("10.0.0.5", ("Console.Example.com",)) == {
        "localhost",
        "127.0.0.1",
        "::1",
        "10.0.0.5",
        "console.example.com",
    }
    assert "0.0.0.0" not in allowed_hosts("0.0.0.0", ("a.example",))
    assert host_error("console.example.com") is None
    assert host_error("[::1]") is None
    assert host_error("*") is not None
    assert host_error("*.example.com") is not None
    assert host_error("example.com:8080") is not None
    assert host_error("http://example.com") is not None
