"""Opens connections to PostgreSQL with the settings every connection needs, and hides passwords."""

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row

from scheduler_daemon.storage.error import DatabaseUnavailable

CONNECT_TIMEOUT_SECONDS = 5
# libpq TCP keepalives: a peer that vanished is noticed in about a minute, not hours.
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}
_PASSWORD_IN_URL = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<pw>[^@\s]*)(?=@)", re.I)
_PASSWORD_IN_DSN = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<pw>'[^']*'|\S+)", re.I)


def redact(text: str) -> str:
    """`text` with any password in a URL or a key=value DSN replaced by ***."""
    text = _PASSWORD_IN_URL.sub(lambda m: m["head"] + "***", text)
    return _PASSWORD_IN_DSN.sub(lambda m: m["head"] + "***", text)


def connect(url: str, *, autocommit: bool = False, **kwargs: Any) -> psycopg.Connection[Any]:
    """A connection with dict rows, no server-side prepared statements (PgBouncer transaction
    mode), TCP keepalives and a connect timeout; DatabaseUnavailable with a redacted line if not."""
    try:
        return psycopg.connect(
            url,
            autocommit=autocommit,
            row_factory=dict_row,
            prepare_threshold=None,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            application_name="scheduler-daemon",
            **KEEPALIVES,
            **kwargs,
        )
    except psycopg.Error as exc:
        reason = redact(
            str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        )
        raise DatabaseUnavailable(
            f"cannot connect to the database at {redact(url)}: {reason}"
        ) from exc


@contextmanager
def transaction(url: str) -> Iterator[psycopg.Connection[Any]]:
    """One short transaction on a fresh connection: committed on success, rolled back on error."""
    conn = connect(url)
    try:
        with conn.transaction():
            yield conn
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(
            f"lost the database connection: {redact(str(exc).strip())}"
        ) from exc
    finally:
        conn.close()
