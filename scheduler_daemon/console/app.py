"""The console's ASGI application: its routes, the templates (Jinja, autoescaped), the
vendored htmx served from the package, and the security headers on every response."""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import psycopg
import structlog
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from scheduler_daemon.client import Client
from scheduler_daemon.console import actions, pages, session
from scheduler_daemon.console.guard import CSRF_FIELD, SESSION_COOKIE, Guard, Refused
from scheduler_daemon.console.host import AllowedHosts
from scheduler_daemon.services.auditor import InvalidWindow
from scheduler_daemon.storage.error import DatabaseUnavailable

HERE = Path(__file__).parent
HTMX = "htmx-2.0.11.min.js"  # the vendored file (ADR 0018 names its version and licence)
MAX_FORM_BYTES = 16 * 1024
REFRESH_SECONDS = 5
AUDIT_WINDOWS = {"15m": timedelta(minutes=15), "1h": timedelta(hours=1), "24h": timedelta(days=1)}
SECURITY_HEADERS = {
    # no inline script or style: htmx comes from /static, its indicator styles are off
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}

log = structlog.get_logger("scheduler_daemon.console")


@dataclass(frozen=True)
class Console:
    client: Client
    guard: Guard
    templates: Environment


def templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(htmx=HTMX, refresh=REFRESH_SECONDS, csrf_field=CSRF_FIELD)
    return env


Gather = Callable[[Client, Request], dict[str, Any]]
Step = Callable[[Client, Request, dict[str, str], str], actions.Done]


def _id(request: Request, name: str) -> int:
    return int(request.path_params[name])


def _tasks(client: Client, request: Request) -> dict[str, Any]:
    query = request.query_params
    found = pages.tasks(
        client,
        prefix=query.get("prefix"),
        status=query.get("status"),
        verdict=query.get("verdict"),
        after=query.get("after"),
    )
    return {**found, "query": dict(query), "statuses": pages.STATUSES, "verdicts": pages.VERDICTS}


def _backfill(client: Client, request: Request, form: dict[str, str], actor: str) -> actions.Done:
    return actions.backfill_range(
        client,
        _id(request, "task_id"),
        actor,
        start=form.get("from", ""),
        end=form.get("to", ""),
        confirm=form.get("confirm") == "yes",
    )


def audit_page(gate: threading.Lock) -> Gather:
    """The read-only audit over the chosen window (15m, 1h or 24h), run when asked, on the
    console's own Client (no connection of its own) and one at a time: a request while one
    runs is refused at once (429), so a flood of requests queues nothing."""

    def gather(client: Client, request: Request) -> dict[str, Any]:
        from scheduler_daemon import presentation

        window = request.query_params.get("since", "1h")
        if window not in AUDIT_WINDOWS:
            window = "1h"
        if not gate.acquire(blocking=False):
            raise actions.Busy("an audit is running already; try again when it has finished")
        try:
            report = client.audit(since=AUDIT_WINDOWS[window])
        except InvalidWindow as exc:
            return {"window": window, "windows": list(AUDIT_WINDOWS), "error": str(exc)}
        finally:
            gate.release()
        return {
            "window": window,
            "windows": list(AUDIT_WINDOWS),
            "report": presentation.audit_fields(report),
            "text": presentation.audit_text(report),
        }

    return gather


# The pages (GET): path, template, what it reads.
PAGES: tuple[tuple[str, str, Gather], ...] = (
    ("/", "fleet.html", lambda c, r: pages.fleet(c)),
    ("/tasks", "tasks.html", _tasks),
    (
        "/tasks/{task_id:int}",
        "task.html",
        lambda c, r: pages.task(c, _id(r, "task_id"), after=r.query_params.get("after")),
    ),
    ("/running", "running.html", lambda c, r: pages.running(c)),
    (
        "/occurrences/{occurrence_id:int}",
        "occurrence.html",
        lambda c, r: pages.occurrence(c, _id(r, "occurrence_id")),
    ),
    ("/login", "login.html", lambda c, r: {}),
)
# The actions (POST): path, what it does as the operator.
ACTIONS: tuple[tuple[str, Step], ...] = (
    ("/tasks/{task_id:int}/trigger", lambda c, r, f, a: actions.trigger(c, _id(r, "task_id"), a)),
    (
        "/tasks/{task_id:int}/pause",
        lambda c, r, f, a: actions.pause(c, _id(r, "task_id"), a, until=f.get("until", "")),
    ),
    ("/tasks/{task_id:int}/resume", lambda c, r, f, a: actions.resume(c, _id(r, "task_id"), a)),
    ("/tasks/{task_id:int}/backfill", _backfill),
    (
        "/occurrences/{occurrence_id:int}/cancel",
        lambda c, r, f, a: actions.cancel(c, _id(r, "occurrence_id"), a),
    ),
)


def build_app(client: Client, guard: Guard) -> Starlette:
    """The application over `client` (its database URL is never rendered)."""
    console = Console(client, guard, templates())
    audit = ("/audit", "audit.html", audit_page(threading.Lock()))
    routes: list[Any] = [
        Route(path, page(console, name, gather), methods=["GET"])
        for path, name, gather in (*PAGES, audit)
    ]
    routes += [Route(path, act(console, step), methods=["POST"]) for path, step in ACTIONS]
    routes += [
        Route("/login", login(console), methods=["POST"]),
        Route("/logout", logout(console), methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [
        Middleware(AllowedHosts, hosts=guard.allowed_hosts),  # first: before any page
        Middleware(SecurityHeaders),
    ]
    return Starlette(routes=routes, middleware=middleware)


def page(console: Console, name: str, gather: Gather) -> Callable[..., Response]:
    """A page's endpoint (run in the thread pool): the template over what `gather` read, or the
    one-line refusal (an unknown task, a bad filter, the database's error); its server time in
    the `Server-Timing` header."""

    def endpoint(request: Request) -> Response:
        started = time.perf_counter()
        try:
            response = render(console, request, name, gather(console.client, request))
        except (*actions.REFUSALS, psycopg.Error, DatabaseUnavailable) as exc:
            done = actions.refusal(exc)
            response = render(console, request, "done.html", {"done": done}, done.status)
        elapsed = (time.perf_counter() - started) * 1000
        response.headers["server-timing"] = f"app;dur={elapsed:.1f}"
        return response

    return endpoint


def act(console: Console, step: Step) -> Callable[..., Any]:
    """An action's endpoint: writes on, then the same-origin and CSRF checks (or a Bearer
    credential), then an operator (guard.py), in that order; then `step` in the thread pool,
    its refusal as one line."""
    guard = console.guard

    async def endpoint(request: Request) -> Response:
        form = await _form(request)
        headers = dict(request.headers)
        session_id = _session_id(request)
        try:
            if not guard.writes:
                guard.actor(headers={}, session_id=None, client_host="")  # raises read-only
            guard.check_write(headers, session_id, form.get(CSRF_FIELD))
            actor = guard.actor(
                headers=headers,
                session_id=session_id,
                client_host=_client(request),
            )
        except Refused as exc:
            log.warning("console_action_refused", path=request.url.path, reason=str(exc))
            done = actions.Done(str(exc), ok=False, status=exc.status)
        else:
            done = await run_in_threadpool(
                actions.attempt, lambda: step(console.client, request, form, actor)
            )
            log.info(
                "console_action",
                path=request.url.path,
                actor=actor,
                ok=done.ok,
                message=done.message,
            )
        back = request.url.path.rsplit("/", 1)[0]
        shown = {k: form[k] for k in ("from", "to") if k in form}
        context = {"done": done, "back": back, "form": shown}
        return render(console, request, "done.html", context, done.status)

    return endpoint


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every response (static files keep their own caching)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = scope["path"].startswith("/static/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    if not (static and name == "cache-control"):
                        headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, with_headers)


def render(
    console: Console, request: Request, name: str, context: dict[str, Any], status: int = 200
) -> HTMLResponse:
    """A page; its forms carry a CSRF token bound to this browser's session id, and a browser
    without one is given one (anonymous until it signs in)."""
    guard = console.guard
    session_id = _session_id(request)
    fresh = session_id is None
    session_id = session_id or session.new_session_id()
    html = console.templates.get_template(name).render(
        **context,
        path=request.url.path,
        here=request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        csrf=guard.csrf_token(session_id, dict(request.headers)),
        writes=guard.writes,
        token_sign_in=guard.writes and guard.token is not None,
        signed_in=guard.sessions.signed_in(session_id),
    )
    response = HTMLResponse(html, status_code=status)
    if fresh:
        _set_session(response, request, session_id)
    return response


def login(console: Console) -> Callable[..., Any]:
    """Signs in with the console token, at most SIGN_IN_BURST tries at once per client address
    (then 429 with Retry-After): a new session id (the one the browser had is not signed in),
    held by this process until it ends or the operator signs out."""

    async def endpoint(request: Request) -> Response:
        form = await _form(request)
        guard = console.guard
        try:
            guard.limit_sign_in(_client(request))
            guard.offers_sign_in()
            guard.check_write(dict(request.headers), _session_id(request), form.get(CSRF_FIELD))
            session_id = guard.sign_in(form.get("token", ""))
        except Refused as exc:
            log.warning("console_sign_in_refused", reason=str(exc), client=_client(request))
            done = actions.Done(str(exc), ok=False, status=exc.status)
            page = render(console, request, "done.html", {"done": done}, exc.status)
            if exc.retry_after is not None:
                page.headers["retry-after"] = str(exc.retry_after)
            return page
        response = RedirectResponse("/", status_code=303)
        _set_session(response, request, session_id, max_age=int(guard.session_lifetime))
        return response

    return endpoint


def logout(console: Console) -> Callable[..., Any]:
    """Signs out (a same-origin POST with the CSRF token): the session id is signed in no more,
    whoever holds it, and the browser gets a fresh anonymous one."""

    async def endpoint(request: Request) -> Response:
        form = await _form(request)
        guard = console.guard
        session_id = _session_id(request)
        try:
            guard.check_write(dict(request.headers), session_id, form.get(CSRF_FIELD))
        except Refused as exc:
            log.warning("console_sign_out_refused", reason=str(exc))
            done = actions.Done(str(exc), ok=False, status=exc.status)
            return render(console, request, "done.html", {"done": done}, exc.status)
        guard.sessions.end(session_id)
        response = RedirectResponse("/", status_code=303)
        _set_session(response, request, session.new_session_id())
        return response

    return endpoint


def _session_id(request: Request) -> str | None:
    """The browser's session id, if it is one this process could have made."""
    given = request.cookies.get(SESSION_COOKIE)
    return given if session.well_formed(given) else None


def _set_session(
    response: Response, request: Request, session_id: str, *, max_age: int | None = None
) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        max_age=max_age,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def _client(request: Request) -> str:
    """The client's address: the peer's, or with --forwarded-allow-ips the proxy's word."""
    return request.client.host if request.client else "unknown"


async def _form(request: Request) -> dict[str, str]:
    """An urlencoded form, at most MAX_FORM_BYTES; the first value of each field."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return {}
    parsed = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[0] for k, v in parsed.items()}
