"""Opens connections to PostgreSQL with the settings every connection needs; its messages never
echo the URL: they name the server as `host:port/dbname` and mask the URL's password in any
form (domain.secret)."""

import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from scheduler_daemon.domain.secret import mask_values, redact, url_passwords
from scheduler_daemon.storage import query
from scheduler_daemon.storage.error import DatabaseUnavailable

CONNECT_TIMEOUT_SECONDS = 5
# libpq TCP keepalives: a peer that vanished is noticed in about a minute, not hours. Keepalives
# only probe an idle connection; TCP_USER_TIMEOUT also ends a statement sent into a partition
# (unacknowledged for 60 s) instead of the kernel's ~15 minutes of retransmissions, so a loop
# pass always ends (settings.PASS_BLOCK_BOUND counts on it). Linux; elsewhere libpq ignores it.
KEEPALIVES: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 60_000,
}


UNPARSEABLE = "<unparseable database URL>"


def describe_server(url: str) -> str:
    """`host:port/dbname` of a database URL or keyword DSN, as libpq reads it, for messages
    (never the URL itself); UNPARSEABLE when libpq cannot read it, or reads a host with an `@`
    (a password with an unencoded `@`: the rest of it would show as the host)."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        return UNPARSEABLE
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    if "@" in host:
        return UNPARSEABLE
    dbname = params.get("dbname") or params.get("user") or "(default)"
    return f"{host}:{params.get('port') or 5432}/{dbname}"


def connect(url: str, *, autocommit: bool = False, **kwargs: Any) -> psycopg.Connection[Any]:
    """A connection with dict rows, no server-side prepared statements (PgBouncer transaction
    mode), TCP keepalives and a connect timeout; DatabaseUnavailable with one line naming the
    server (`describe_server`) if not, the password masked in any form libpq echoes."""
    server = describe_server(url)
    if server == UNPARSEABLE:  # libpq's own message quotes the value it could not read
        raise DatabaseUnavailable(f"cannot connect to the database: {UNPARSEABLE}")
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
        reason = mask_values(first_line(exc), url_passwords(url))
        raise DatabaseUnavailable(f"cannot connect to the database at {server}: {reason}") from exc


@contextmanager
def transaction(url: str, limits: "Limits | None" = None) -> Iterator[psycopg.Connection[Any]]:
    """One short transaction on a fresh connection, with the per-transaction limits set:
    committed on success, rolled back on error."""
    conn = connect(url)
    try:
        with conn.transaction():
            apply_limits(conn, limits or Limits())
            yield conn
    except psycopg.OperationalError as exc:
        if not is_connection_error(exc):
            raise  # a lock or statement timeout, a deadlock: the caller's error, not an outage
        raise DatabaseUnavailable(f"lost the database connection: {first_line(exc)}") from exc
    finally:
        conn.close()


class Session:
    """One connection reused for transaction after transaction (the Client's): opened on first
    use; reopened after it broke and in a process forked from the one that opened it, where the
    parent's socket is left alone (psycopg only sends the goodbye from the process that opened
    it, so the parent's session lives on). No session state is ever set on it, so it works
    through PgBouncer in transaction mode. Threads take turns on it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: psycopg.Connection[Any] | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def _forked(self) -> None:
        """In a child of the process that opened the connection: forget it, never close it (a
        close would end the parent's session), and start with a lock no parent thread holds."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._conn = None
            self._lock = threading.Lock()

    @contextmanager
    def transaction(self, limits: "Limits | None" = None) -> Iterator[psycopg.Connection[Any]]:
        """One short transaction on the reused connection, with the per-transaction limits set:
        committed on success, rolled back on error (`begin` without its extras)."""
        with self.begin(limits) as begun:
            yield begun.conn

    @contextmanager
    def begin(
        self,
        limits: "Limits | None" = None,
        *,
        now: datetime | None = None,
        then: "tuple[str, dict[str, Any]] | None" = None,
    ) -> Iterator["Begun"]:
        """One short transaction on the reused connection, begun in one round trip that also
        sets the per-transaction limits, reads the database clock (`now` pins it: a test's time)
        and runs `then`, a named statement with its parameters (the first statement of the
        transaction, e.g. the parent lock; its result as its cardinality says): committed on
        success, rolled back on error. A connection found dead by that round trip (a server
        restart while it sat idle) is replaced once, since nothing was written yet; a connection
        lost later is DatabaseUnavailable, and the next transaction opens a new one."""
        self._forked()
        with self._lock:
            begun = self._begin(limits or Limits(), now, then)
            conn = begun.conn
            try:
                yield begun
            except psycopg.OperationalError as exc:
                self._end(conn, commit=False)
                if not is_connection_error(exc):
                    raise  # a lock or statement timeout, a deadlock: the caller's error
                raise DatabaseUnavailable(
                    f"lost the database connection: {first_line(exc)}"
                ) from exc
            except BaseException:
                self._end(conn, commit=False)
                raise
            self._end(conn, commit=True)

    def _begin(
        self,
        limits: "Limits",
        now: datetime | None,
        then: "tuple[str, dict[str, Any]] | None",
    ) -> "Begun":
        reused = self._conn is not None and not self._conn.closed
        if not reused:
            # autocommit: the transaction is begun by `begin_statement` itself, so BEGIN costs no
            # round trip of its own (psycopg's implicit BEGIN would).
            self._conn = connect(self.url, autocommit=True)
        conn = self._conn
        assert conn is not None
        try:
            db_now, result = begin_statement(conn, limits, now, then)
        except psycopg.OperationalError as exc:
            if not is_connection_error(exc):  # a lock or statement timeout in `then`
                self._end(conn, commit=False)
                raise
            self._discard()
            if not reused:
                raise DatabaseUnavailable(
                    f"lost the database connection: {first_line(exc)}"
                ) from exc
            return self._begin(limits, now, then)  # the idle connection had died: one fresh try
        except BaseException:
            self._end(conn, commit=False)
            raise
        return Begun(conn, db_now, result)

    def _end(self, conn: psycopg.Connection[Any], *, commit: bool) -> None:
        try:
            if commit:
                conn.commit()
            elif not conn.closed:
                conn.rollback()
        except psycopg.OperationalError as exc:
            self._discard()
            if commit:  # the outcome is unknown: say so, as a lost connection
                raise DatabaseUnavailable(
                    f"lost the database connection at commit: {first_line(exc)}"
                ) from exc
        if conn.broken:
            self._discard()

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Closes the connection (in a forked child: forgets the parent's without closing it)."""
        self._forked()
        with self._lock:
            self._discard()


@dataclass(frozen=True)
class Begun:
    """A transaction `Session.begin` opened: its connection, its clock (the database's `now()`,
    or the pinned time) and the result of the statement sent with its BEGIN (None: none sent)."""

    conn: psycopg.Connection[Any]
    now: datetime
    result: Any = None


Then = tuple[str, dict[str, Any]]
"""A named statement and its parameters, sent with a transaction's BEGIN (its first statement)."""

# The named BEGIN statements: with the limits; also reading the clock; a read-only snapshot;
# and the limits alone (an implicit transaction's first statement, or inside a transaction).
_BEGIN = "session_begin"
_BEGIN_CLOCK = "session_begin_clock"
_BEGIN_SNAPSHOT = "session_begin_snapshot"
_LIMITS = "session_limits"


def begin_statement(
    conn: psycopg.Connection[Any], limits: "Limits", now: datetime | None, then: Then | None
) -> tuple[datetime, Any]:
    """Begins a transaction on the autocommit `conn` with the limits set and the clock read
    (`session_begin_clock`), and `then` after them, in one round trip (`_send_begin`).
    Returns the clock and what `then`'s cardinality promises."""
    cursor = _send_begin(conn, _BEGIN_CLOCK, {**_limit_params(limits), "now": now}, then)
    row = cursor.fetchone()
    assert row is not None
    return row["db_now"], _then_result(cursor, then)


def _send_begin(
    conn: psycopg.Connection[Any], begin: str, params: dict[str, Any], then: Then | None
) -> psycopg.ClientCursor[Any]:
    """Sends the named BEGIN statements `begin` and `then` after them as one simple query (one
    round trip, parameters bound client-side: fine through PgBouncer, nothing is prepared);
    returns the cursor at the result of the BEGIN's last statement."""
    sql = query.QUERIES[begin].sql
    if then is not None:
        name, then_params = then
        overlap = {k for k in set(then_params) & set(params) if then_params[k] != params[k]}
        assert not overlap, f"{name} gives parameters of the BEGIN other values: {overlap}"
        sql = f"{sql};\n{query.QUERIES[name].sql}"
        params = {**params, **then_params}
    cursor = psycopg.ClientCursor(conn)
    cursor.execute(sql, params)
    cursor.nextset()  # past BEGIN's command status, to the limits (and the clock)
    return cursor


def _then_result(cursor: psycopg.ClientCursor[Any], then: Then | None) -> Any:
    """What `then`'s cardinality promises, from its last statement (it may hold several)."""
    if then is None:
        return None
    while cursor.nextset():
        pass
    return query.result(cursor, query.QUERIES[then[0]].cardinality)


@dataclass(frozen=True)
class Limits:
    """Per-transaction limits, applied with SET LOCAL semantics (PgBouncer transaction mode)."""

    lock_timeout: str = "5s"
    statement_timeout: str = "30s"
    idle_timeout: str = "60s"


# One unit of maintenance work (a completion, a takeover) waits briefly for a row lock and is
# retried later, so one row held by someone else never stalls the loop for the full timeout.
UNIT_LIMITS = Limits(lock_timeout="1s")
# Its first try waits only as long as a peer's own short transaction on the row can last, and the
# units that could not lock are tried again with UNIT_LIMITS after all the others: a row held for
# long delays its own unit, not the units queued behind it.
FIRST_TRY_LIMITS = Limits(lock_timeout="100ms")


def make_pool(url: str, *, max_size: int, name: str) -> ConnectionPool:
    """A small pool for one daemon's loop; opened lazily so a database that is down at start
    is retried by the caller instead of failing the constructor."""
    return ConnectionPool(
        url,
        min_size=1,
        max_size=max_size,
        open=False,
        name=name,
        timeout=5.0,
        reconnect_timeout=5.0,
        kwargs={
            "row_factory": dict_row,
            "prepare_threshold": None,
            # Transactions are begun by `_pooled` itself: BEGIN and the limits in one round trip.
            "autocommit": True,
            "connect_timeout": CONNECT_TIMEOUT_SECONDS,
            "application_name": name,
            **KEEPALIVES,
        },
    )


@contextmanager
def pooled_transaction(pool: ConnectionPool, limits: Limits | None = None) -> Iterator[Any]:
    """One short transaction on a pooled connection, with the per-transaction limits set;
    DatabaseUnavailable when the database cannot be reached."""
    with _pooled(pool, limits, snapshot=False) as conn:
        yield conn


@contextmanager
def snapshot_transaction(pool: ConnectionPool, limits: Limits | None = None) -> Iterator[Any]:
    """One REPEATABLE READ, READ ONLY transaction on a pooled connection: every statement in it
    sees the same snapshot and none can write. Errors as for `pooled_transaction`."""
    with _pooled(pool, limits, snapshot=True) as conn:
        yield conn


def pooled_single_trip(pool: ConnectionPool, then: Then, limits: Limits | None = None) -> Any:
    """A whole short transaction in one round trip: the per-transaction limits and `then`'s
    statements as one simple query (parameters bound client-side: fine through PgBouncer), with
    no BEGIN or COMMIT: the server runs a simple query of several statements as one implicit
    transaction, so no lock it takes is held across a round trip. Returns what `then`'s
    cardinality promises, from its last statement. Errors as for `pooled_transaction`; on any
    error nothing is committed."""
    (result,) = _single_trip(pool, [then], limits)
    return result


def pooled_single_trip_pair(
    pool: ConnectionPool, first: Then, second: Then, limits: Limits | None = None
) -> tuple[Any, Any]:
    """`pooled_single_trip` of two named statements, `second` after `first` in the same
    implicit transaction: both commit, or (on any error) neither. Returns what each one's
    cardinality promises. A parameter both name must have one value."""
    first_result, second_result = _single_trip(pool, [first, second], limits)
    return first_result, second_result


def _single_trip(pool: ConnectionPool, thens: list[Then], limits: Limits | None) -> list[Any]:
    params: dict[str, Any] = {**_limit_params(limits or Limits())}
    for name, then_params in thens:
        clash = {k for k in set(then_params) & set(params) if then_params[k] != params[k]}
        assert not clash, f"{name} gives parameters other values: {clash}"
        params.update(then_params)
    sql = ";\n".join(query.QUERIES[name].sql for name in [_LIMITS, *(name for name, _ in thens)])
    with _connection(pool) as conn:
        cursor = psycopg.ClientCursor(conn)
        cursor.execute(sql, params)
        results = []
        before = _statements(_LIMITS)  # past the limits, and then each earlier statement's last
        for name, _ in thens:
            results.append(_last_result(cursor, name, before=before))
            before = 1
        return results


@functools.cache
def _statements(name: str) -> int:
    """How many statements the named query holds (they are separated by ';' and a newline)."""
    return query.QUERIES[name].sql.count(";\n") + 1


def _last_result(cursor: psycopg.ClientCursor[Any], name: str, *, before: int) -> Any:
    """What the named query's cardinality promises, from its last statement, on a cursor at
    the first result of a simple query that sent `before` statements ahead of it."""
    for _ in range(before + _statements(name) - 1):
        cursor.nextset()
    return query.result(cursor, query.QUERIES[name].cardinality)


@contextmanager
def clock_transaction(
    pool: ConnectionPool, then: Then, now: datetime | None = None, limits: Limits | None = None
) -> Iterator[Begun]:
    """One short transaction on a pooled connection whose BEGIN round trip also reads its
    clock (now(), or the time a test pinned) and runs `then`; yields them as a `Begun`. It is
    committed on exit unless `commit_with` ended it already; rolled back on any error. Errors
    as for `pooled_transaction`."""
    with _connection(pool) as conn:
        try:
            db_now, result = begin_statement(conn, limits or Limits(), now, then)
            yield Begun(conn, db_now, result)
        except BaseException:
            if not conn.closed and not conn.broken:
                conn.rollback()
            raise
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.commit()


_UNIT_SAVEPOINT = "unit"


def unit_statement(conn: psycopg.Connection[Any], then: Then) -> Any:
    """Runs `then` in a savepoint of its own sent with it (one round trip, where psycopg's
    `conn.transaction()` takes three), inside an open transaction. On an error the server
    reported, the transaction is rolled back to that savepoint, so it goes on without `then`'s
    writes, and the error is raised. The savepoint is released when the transaction ends."""
    name, params = then
    cursor = psycopg.ClientCursor(conn)
    try:
        cursor.execute(f"SAVEPOINT {_UNIT_SAVEPOINT};\n{query.QUERIES[name].sql}", params)
    except psycopg.Error:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            conn.execute(f"ROLLBACK TO SAVEPOINT {_UNIT_SAVEPOINT}")
        raise
    return _last_result(cursor, name, before=1)


def commit_with(conn: psycopg.Connection[Any], then: Then) -> Any:
    """Sends `then` and COMMIT as one simple query (one round trip) on a connection inside a
    transaction; returns what `then`'s cardinality promises."""
    name, params = then
    cursor = psycopg.ClientCursor(conn)
    cursor.execute(f"{query.QUERIES[name].sql};\nCOMMIT", params)
    return _last_result(cursor, name, before=0)


@contextmanager
def _pooled(
    pool: ConnectionPool, limits: Limits | None, *, snapshot: bool = False
) -> Iterator[Any]:
    begin = _BEGIN_SNAPSHOT if snapshot else _BEGIN
    with _connection(pool) as conn, _begun(conn, limits or Limits(), begin=begin):
        yield conn


@contextmanager
def _connection(pool: ConnectionPool) -> Iterator[psycopg.Connection[Any]]:
    """A pooled connection; DatabaseUnavailable when the database cannot be reached."""
    try:
        with pool.connection() as conn:
            yield conn
    except PoolTimeout as exc:
        raise DatabaseUnavailable(f"database unavailable: {first_line(exc)}") from exc
    except psycopg.OperationalError as exc:
        if not is_connection_error(exc):
            raise
        raise DatabaseUnavailable(f"database unavailable: {first_line(exc)}") from exc


@contextmanager
def _begun(conn: psycopg.Connection[Any], limits: Limits, *, begin: str) -> Iterator[None]:
    """One transaction on an autocommit connection whose BEGIN (the named statements `begin`)
    carries the limits: one round trip (`_send_begin`) where `conn.transaction()` plus
    `apply_limits` took two. A `conn.transaction()` inside is a savepoint, as before; committed
    on success, rolled back on any error."""
    try:
        _send_begin(conn, begin, _limit_params(limits), None)
        yield
    except BaseException:
        if not conn.closed and not conn.broken:
            conn.rollback()
        raise
    conn.commit()


# SQLSTATEs that mean the server went away: admin/crash shutdown, cannot connect now.
_SERVER_GONE = ("57P01", "57P02", "57P03")


def is_connection_error(exc: psycopg.Error) -> bool:
    """True when the connection or server is gone (no SQLSTATE, class 08, shutdown), as opposed
    to an error the server reported on a live connection (lock timeout, deadlock, ...)."""
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _SERVER_GONE


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an error, redacted: messages stay one line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return redact(lines[0] if lines else type(exc).__name__)


def _limit_params(limits: Limits) -> dict[str, str]:
    return {
        "lock_timeout": limits.lock_timeout,
        "statement_timeout": limits.statement_timeout,
        "idle_timeout": limits.idle_timeout,
    }


def apply_limits(conn: psycopg.Connection[Any], limits: Limits) -> None:
    """Sets the per-transaction limits (SET LOCAL semantics) in the open transaction."""
    query.run(conn, _LIMITS, _limit_params(limits))
