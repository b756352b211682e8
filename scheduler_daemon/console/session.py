"""The console's sign-in state, held by the process (ADR 0030): the signed-in sessions, each with
its end, and the per-client sign-in rate limit. In memory and bounded; a restart signs everyone
out. Time is the process's monotonic clock (injectable for tests): nothing here is shared with
another process or compared with the database's clock."""

import math
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable

SESSION_ID_CHARS = 32  # secrets.token_urlsafe(24)
MAX_SESSIONS = 10_000  # signed-in sessions held; past it the oldest is signed out
MAX_CLIENTS = 10_000  # sign-in buckets held; past it the oldest is forgotten (a full bucket)
SIGN_IN_BURST = 5  # sign-in attempts a client may make at once
SIGN_IN_EVERY = 10.0  # seconds: then one more attempt each


def new_session_id() -> str:
    return secrets.token_urlsafe(24)


def well_formed(session_id: str | None) -> bool:
    """A session id this process could have made (32 URL-safe characters); anything else in the
    cookie is ignored and a fresh one given."""
    return (
        session_id is not None
        and len(session_id) == SESSION_ID_CHARS
        and all(c.isascii() and (c.isalnum() or c in "-_") for c in session_id)
    )


class Sessions:
    """The signed-in session ids and when each ends (`lifetime` seconds after the sign-in). A
    session id is random, given only to the browser that signed in, and replaced at sign-in (a
    session id planted before it is never signed in); sign-out removes it."""

    def __init__(self, lifetime: float, clock: Callable[[], float]) -> None:
        self.lifetime = lifetime
        self.clock = clock
        self._ends: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def start(self) -> str:
        """A new signed-in session; its id."""
        session_id = new_session_id()
        with self._lock:
            if len(self._ends) >= MAX_SESSIONS:
                self._drop_ended()
            while len(self._ends) >= MAX_SESSIONS:
                self._ends.popitem(last=False)
            self._ends[session_id] = self.clock() + self.lifetime
        return session_id

    def signed_in(self, session_id: str | None) -> bool:
        if not session_id:
            return False
        with self._lock:
            end = self._ends.get(session_id)
            if end is None:
                return False
            if self.clock() >= end:
                del self._ends[session_id]
                return False
            return True

    def end(self, session_id: str | None) -> None:
        """Sign-out: the session id is signed in no more, whoever holds it."""
        if session_id:
            with self._lock:
                self._ends.pop(session_id, None)

    def _drop_ended(self) -> None:
        now = self.clock()
        for session_id in [s for s, end in self._ends.items() if now >= end]:
            del self._ends[session_id]


class SignInLimit:
    """A token bucket per client address: SIGN_IN_BURST attempts, then one each SIGN_IN_EVERY
    seconds. `take` answers None (go on) or the seconds until the next attempt is allowed."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at
        self._lock = threading.Lock()

    def take(self, client: str) -> int | None:
        now = self.clock()
        with self._lock:
            tokens, at = self._buckets.pop(client, (float(SIGN_IN_BURST), now))
            tokens = min(float(SIGN_IN_BURST), tokens + (now - at) / SIGN_IN_EVERY)
            if tokens >= 1:
                self._buckets[client] = (tokens - 1, now)
                wait = None
            else:
                self._buckets[client] = (tokens, now)
                wait = max(1, math.ceil((1 - tokens) * SIGN_IN_EVERY))
            while len(self._buckets) > MAX_CLIENTS:
                self._buckets.popitem(last=False)
        return wait
