"""Who may act through the console, and the CSRF check every POST passes (ADR 0018).

Reads are open to whoever reaches the port (it binds 127.0.0.1 unless told). An action needs
all of: writes enabled (`--writes`), a form carrying the CSRF token that matches this browser's
CSRF cookie (both minted and signed by this process), and an operator: the console token (its
session cookie, set by signing in, or an `Authorization: Bearer` header) or, with
`--trust-header NAME`, a non-empty NAME header set by the authenticating proxy in front.
"""

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

CSRF_COOKIE = "sd_csrf"
SESSION_COOKIE = "sd_session"
CSRF_FIELD = "csrf"
MAX_ACTOR_CHARS = 200


class Refused(Exception):
    """An action refused before it reached the database; `status` is the HTTP status and the
    message one line, shown in the page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Guard:
    writes: bool
    token: str | None
    trust_header: str | None
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    def __repr__(self) -> str:  # never the token
        return f"Guard(writes={self.writes}, trust_header={self.trust_header!r})"

    # -- CSRF: a random nonce signed by this process; the cookie and the form must agree ----------
    def new_csrf(self) -> str:
        nonce = secrets.token_urlsafe(18)
        return f"{nonce}.{self._sign('csrf:' + nonce)}"

    def csrf_valid(self, cookie: str | None) -> bool:
        """A CSRF cookie this process minted (not one planted from elsewhere)."""
        if not cookie or "." not in cookie:
            return False
        nonce, mac = cookie.rsplit(".", 1)
        return hmac.compare_digest(mac, self._sign("csrf:" + nonce))

    def check_csrf(self, cookie: str | None, submitted: str | None) -> None:
        if not (
            submitted and self.csrf_valid(cookie) and hmac.compare_digest(submitted, cookie or "")
        ):
            raise Refused(
                403, "refused: the form's CSRF token is missing or wrong; reload the page"
            )

    # -- the operator --------------------------------------------------------------------------
    def session_value(self) -> str:
        """The session cookie a correct token sign-in sets (it holds no token)."""
        assert self.token is not None
        digest = hashlib.sha256(self.token.encode()).hexdigest()
        return self._sign("session:" + digest)

    def token_matches(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(
            given.encode("utf-8", "surrogatepass"), self.token.encode()
        )

    def check_token(self, given: str) -> None:
        """A sign-in: refused unless writes are on and `given` is the token."""
        if not (self.writes and self.token_matches(given)):
            raise Refused(401, "refused: wrong token, or this console takes none")

    def actor(
        self,
        *,
        headers: dict[str, str],
        session: str | None,
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
        if self.token is not None:
            bearer = headers.get("authorization", "")
            if bearer.startswith("Bearer ") and self.token_matches(bearer[7:]):
                return f"console-token@{client_host}"
            if session and hmac.compare_digest(session, self.session_value()):
                return f"console-token@{client_host}"
        if self.trust_header is not None and self.token is None:
            raise Refused(401, f"refused: no {self.trust_header} header from the proxy")
        raise Refused(401, "refused: sign in with the console token first")

    def _sign(self, text: str) -> str:
        return hmac.new(self.secret, text.encode(), hashlib.sha256).hexdigest()
