"""Who may act through the console, and the checks every write passes (ADR 0018, ADR 0030).

Reads are open to whoever reaches the port under an allowed Host name (host.py). A write (an
action, sign-in, sign-out) needs, in this order: writes enabled (`--writes`, not for sign-out);
a same-origin request (`Sec-Fetch-Site`, else `Origin` against `Host`); and a CSRF token in the
form bound to this browser's session id (an HMAC of the session id and a nonce with the
process's key; under `--trust-header`, of the proxy's user too), so a token minted for another
session, or a session cookie planted from another port, fails. An action then needs an
operator: a signed-in session (session.py), or with `--trust-header NAME` the proxy's NAME
header. A request with a valid `Authorization: Bearer TOKEN` is its own credential (no cookie
rides along with it, so there is nothing to forge): it skips the CSRF token and needs no
Origin, but one that says it came from another origin is still refused.
"""

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler_daemon.console import session
from scheduler_daemon.console.host import LOCAL_HOSTS, Origin, origin

SESSION_COOKIE = "sd_session"
CSRF_FIELD = "csrf"
MAX_ACTOR_CHARS = 200
SESSION_LIFETIME = 12 * 3600.0  # seconds: `--session-lifetime`'s default


class Refused(Exception):
    """An action refused before it reached the database; `status` is the HTTP status and the
    message one line, shown in the page."""

    def __init__(self, status: int, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


@dataclass(frozen=True)
class Guard:
    """The console's security settings and its sign-in state. `check_origin=False` exists for
    tests only (the CLI never sets it): it shows the CSRF token holding alone."""

    writes: bool
    token: str | None
    trust_header: str | None
    allowed_hosts: frozenset[str] = LOCAL_HOSTS
    session_lifetime: float = SESSION_LIFETIME
    check_origin: bool = True
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    sessions: session.Sessions = field(init=False, repr=False)
    sign_ins: session.SignInLimit = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sessions", session.Sessions(self.session_lifetime, self.clock))
        object.__setattr__(self, "sign_ins", session.SignInLimit(self.clock))

    def __repr__(self) -> str:  # never the token
        return f"Guard(writes={self.writes}, trust_header={self.trust_header!r})"

    # -- CSRF: a nonce and an HMAC of it with this browser's session (and proxy user) ---------
    def csrf_token(self, session_id: str, headers: dict[str, str]) -> str:
        nonce = secrets.token_urlsafe(18)
        return f"{nonce}.{self._csrf_mac(nonce, session_id, headers)}"

    def check_csrf(
        self, session_id: str | None, headers: dict[str, str], given: str | None
    ) -> None:
        """Refused unless `given` was minted for this session id (and proxy user)."""
        nonce, _, mac = (given or "").partition(".")
        if not (
            session_id
            and nonce
            and hmac.compare_digest(mac, self._csrf_mac(nonce, session_id, headers))
        ):
            raise Refused(
                403, "refused: the form's CSRF token is missing or wrong; reload the page"
            )

    def _csrf_mac(self, nonce: str, session_id: str, headers: dict[str, str]) -> str:
        user = headers.get(self.trust_header.lower(), "") if self.trust_header else ""
        return self._sign(f"csrf\0{session_id}\0{user}\0{nonce}")

    # -- a write: same origin, then the CSRF token unless a Bearer credential came ----------
    def check_write(
        self, headers: dict[str, str], session_id: str | None, form_token: str | None
    ) -> None:
        """Refused unless the write came from this origin with its session's CSRF token, or
        carries a valid Bearer credential (and says no other origin sent it)."""
        said = origin(headers)
        if self.bearer(headers):
            if said == Origin.FOREIGN and self.check_origin:
                raise Refused(403, _FOREIGN)
            return
        if self.check_origin and said != Origin.SAME:
            raise Refused(403, _FOREIGN if said == Origin.FOREIGN else _UNSAID)
        self.check_csrf(session_id, headers, form_token)

    # -- the operator --------------------------------------------------------------------------
    def bearer(self, headers: dict[str, str]) -> bool:
        given = headers.get("authorization", "")
        return given.startswith("Bearer ") and self.token_matches(given[7:])

    def token_matches(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(
            given.encode("utf-8", "surrogatepass"), self.token.encode()
        )

    def limit_sign_in(self, client: str) -> None:
        """Refused (429, with the seconds to wait) past the sign-in attempts `client` may make."""
        wait = self.sign_ins.take(client)
        if wait is not None:
            raise Refused(
                429, f"refused: too many sign-in attempts; try again in {wait} s", retry_after=wait
            )

    def offers_sign_in(self) -> None:
        """Refused when there is no token to sign in with (read-only, or a proxy's header)."""
        if not (self.writes and self.token is not None):
            raise Refused(401, _NO_SIGN_IN)

    def sign_in(self, given: str) -> str:
        """A sign-in: a new signed-in session id; refused unless writes are on and `given` is
        the token."""
        if not (self.writes and self.token_matches(given)):
            raise Refused(401, _NO_SIGN_IN)
        return self.sessions.start()

    def actor(
        self,
        *,
        headers: dict[str, str],
        session_id: str | None,
        client_host: str,
    ) -> str:
        """Who acts: the proxy's user, or `console-token@HOST`; Refused when writes are off or
        nobody is signed in."""
        if not self.writes:
            raise Refused(
                403,
                "refused: this console is read-only (start it with --writes and a token or "
                "--trust-header)",
            )
        if self.trust_header is not None:
            user = headers.get(self.trust_header.lower(), "").strip()
            if user and user.isprintable():
                return user[:MAX_ACTOR_CHARS]
        if self.token is not None and (self.bearer(headers) or self.sessions.signed_in(session_id)):
            return f"console-token@{client_host}"
        if self.trust_header is not None and self.token is None:
            raise Refused(401, f"refused: no {self.trust_header} header from the proxy")
        raise Refused(401, "refused: sign in with the console token first")

    def _sign(self, text: str) -> str:
        return hmac.new(self.secret, text.encode(), hashlib.sha256).hexdigest()


_NO_SIGN_IN = "refused: wrong token, or this console takes none"
_FOREIGN = "refused: this request came from another site's page, not the console's"
_UNSAID = (
    "refused: no Origin or Sec-Fetch-Site header (a browser sends them; a script sends "
    "Authorization: Bearer)"
)
