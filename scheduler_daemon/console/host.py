"""Where a request says it goes and where it comes from (ADR 0030): the Host allow-list every
request passes (a DNS-rebinding site's name is not on it), and the same-origin judgement every
write passes (`Sec-Fetch-Site`, else `Origin` against `Host`)."""

import ipaddress
from collections.abc import Iterable
from enum import StrEnum
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import structlog

if TYPE_CHECKING:  # the CLI imports this module without the `console` extra
    from starlette.types import ASGIApp, Receive, Scope, Send

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
HOST_REFUSED = b"refused: this console does not answer to that Host (see --allowed-host)\n"

log = structlog.get_logger("scheduler_daemon.console")


def wildcard(bind: str) -> bool:
    """An address that listens on every interface (0.0.0.0, ::)."""
    try:
        return ipaddress.ip_address(bind.strip("[]")).is_unspecified
    except ValueError:
        return bind in ("", "*")


def allowed_hosts(bind: str, given: Iterable[str]) -> frozenset[str]:
    """The names a request's Host may carry: localhost, 127.0.0.1 and ::1, the bind address
    (unless a wildcard), and each --allowed-host; lower case, no port."""
    hosts = set(LOCAL_HOSTS) | {h.lower() for h in given}
    if not wildcard(bind):
        hosts.add(bind.strip("[]").lower())
    return frozenset(hosts)


def host_error(name: str) -> str | None:
    """Why `name` is not an --allowed-host value (a host name or address, no port, scheme,
    path or wildcard), or None."""
    if _address(name.strip("[]")):
        return None
    if not name or "*" in name:
        return "name one host (a wildcard would let any site's name in)"
    if not all(c.isascii() and (c.isalnum() or c in "-.") for c in name):
        return "a host name only (no scheme, port or path)"
    return None


def _address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def host_name(header: str) -> str:
    """A Host header's name: lower case, without its port or an IPv6 address's brackets."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class AllowedHosts:
    """Refuses (421, one line) a request whose Host is not allowed, before any page or action:
    after a DNS rebind the browser sends the rebinding site's name."""

    def __init__(self, app: "ASGIApp", hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: "Scope", receive: "Receive", send: "Send") -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
        if host_name(raw) in self.hosts:
            await self.app(scope, receive, send)
            return
        log.warning("console_host_refused", host=raw[:200], path=scope["path"])
        await send(
            {
                "type": "http.response.start",
                "status": 421,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(HOST_REFUSED)).encode()),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": HOST_REFUSED})


class Origin(StrEnum):
    """What a request's headers say of where it was sent from."""

    SAME = "same"  # a browser says this origin sent it
    FOREIGN = "foreign"  # a browser says another origin (or site) sent it
    UNSAID = "unsaid"  # neither header: not a browser, or a very old one


def origin(headers: dict[str, str]) -> Origin:
    """As Go's CrossOriginProtection judges it: `Sec-Fetch-Site` when the browser sends it
    (`same-origin`, or `none` for the user's own navigation, is this origin; `same-site` and
    `cross-site` are not: another port or subdomain is same-site), else `Origin` compared with
    `Host` (host and port); `Origin: null` is foreign."""
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None:
        return Origin.SAME if fetch_site in ("same-origin", "none") else Origin.FOREIGN
    sent = headers.get("origin")
    if sent is None:
        return Origin.UNSAID
    parts = urlsplit(sent.strip())
    host = headers.get("host", "").strip().lower()
    if parts.scheme in ("http", "https") and parts.netloc.lower() == host and host:
        return Origin.SAME
    return Origin.FOREIGN
