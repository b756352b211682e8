"""Opens connections to PostgreSQL with the settings every connection needs, and runs short
transactions on them: `transaction` and `one_trip` on the daemon's pool, `Session.transaction` on
the Client's reused connection. Its messages never echo the URL: they name the server as
`host:port/dbname` and mask the URL's password in any form (domain.secret)."""

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Self, TypeAlias, cast

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from scheduler_daemon.domain.secret import mask_values, redact, url_passwords
from scheduler_daemon.storage import query
from scheduler_daemon.storage.error import DatabaseUnavailable

Conn: TypeAlias = psycopg.Connection[DictRow]
"""A connection as every one of ours is opened: rows as dicts, nothing prepared."""

Statement: TypeAlias = tuple[str, dict[str, Any]]
"""A named query (sql/*.sql) and its parameters, for a helper that sends it with others."""

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
    (never the URL itself); a multi-host URL names each host with its port
    (`h1:5440,h2:5441/db`); UNPARSEABLE when libpq cannot read it, or reads a host with an `@`
    (a password with an unencoded `@`: the rest of it would show as the host)."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        return UNPARSEABLE
    hosts = str(params.get("host") or params.get("hostaddr") or "localhost").split(",")
    if any("@" in host for host in hosts):
        return UNPARSEABLE
    ports = str(params.get("port") or "").split(",")
    if len(ports) != len(hosts):  # one port (or none) for every host
        ports = [ports[0]] * len(hosts)
    dbname = params.get("dbname") or params.get("user") or "(default)"
    servers = ",".join(
        f"{host or 'localhost'}:{port or 5432}" for host, port in zip(hosts, ports, strict=True)
    )
    return f"{servers}/{dbname}"


READ_WRITE = "read-write"
TARGET_SESSION_ATTRS_ENV = "PGTARGETSESSIONATTRS"


def read_write(url: str) -> str:
    """`url` asking libpq for a server that accepts writes (`target_session_attrs=read-write`,
    as a keyword DSN) unless the URL or PGTARGETSESSIONATTRS sets it already: of a multi-host
    URL the primary is found, and a demoted primary is refused at connect, not at the first
    write. Everything else, the password included, is kept as given; a URL libpq cannot read is
    returned unchanged (the connect that follows reports it)."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        return url
    if params.get("target_session_attrs") or os.environ.get(TARGET_SESSION_ATTRS_ENV):
        return url
    return make_conninfo(url, target_session_attrs=READ_WRITE)


Configure: TypeAlias = Callable[[Conn], None]
"""Run on each new connection before it is used (storage.epoch.EpochWatch); raising refuses it."""


def connect(
    url: str, *, autocommit: bool = False, configure: Configure | None = None, **kwargs: Any
) -> Conn:
    """A connection with dict rows, no server-side prepared statements (PgBouncer transaction
    mode), TCP keepalives, a connect timeout, on a server that accepts writes (`read_write`),
    passed to `configure` first; DatabaseUnavailable with one line naming the server
    (`describe_server`) if not, the password masked in any form libpq echoes."""
    server = describe_server(url)
    if server == UNPARSEABLE:  # libpq's own message quotes the value it could not read
        raise DatabaseUnavailable(f"cannot connect to the database: {UNPARSEABLE}")
    conn: Conn | None = None
    try:
        conn = psycopg.connect(
            read_write(url),
            autocommit=autocommit,
            row_factory=dict_row,
            prepare_threshold=None,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            application_name="scheduler-daemon",
            **KEEPALIVES,
            **kwargs,
        )
        if configure is not None:
            configure(conn)
    except BaseException as exc:
        if conn is not None:
            conn.close()
        if not isinstance(exc, psycopg.Error):
            raise
        reason = mask_values(first_line(exc), url_passwords(url))
        raise DatabaseUnavailable(f"cannot connect to the database at {server}: {reason}") from exc
    return conn


# -- the ways to run a transaction ---------------------------------------------------------------
# Two on the daemon's pool: `transaction` (a short transaction; its first statement may go with
# its BEGIN, its last with its COMMIT: query.run_and_commit) and `one_trip` (statements that are a
# whole transaction, sent in one round trip). One on the Client's reused connection:
# `Session.transaction`, the same shape as `transaction`. Inside any of them, query.run,
# query.run_in_savepoint and query.run_and_commit send one named statement each.


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


@dataclass(frozen=True)
class Tx:
    """An open transaction: its connection, the result of the statement sent with its BEGIN
    (None: none sent) and, when it read one, its clock (the database's `now()`, or the pinned
    time)."""

    conn: Conn
    result: Any = None
    clock: datetime | None = None

    @property
    def now(self) -> datetime:
        """The transaction's clock; only a transaction begun with `clock=True` read one."""
        assert self.clock is not None, "this transaction read no clock (clock=True reads it)"
        return self.clock


@contextmanager
def transaction(
    pool: ConnectionPool,
    limits: Limits | None = None,
    *,
    snapshot: bool = False,
    clock: bool = False,
    now: datetime | None = None,
    first: Statement | None = None,
) -> Iterator[Tx]:
    """One short transaction on a pooled connection. Its BEGIN, the per-transaction `limits`,
    with `clock` the database clock (`now()`, or `now`, a test's pinned time) and `first` (a
    named statement and its parameters, e.g. the due scan; its result as its cardinality says)
    are sent in one round trip. `snapshot`: REPEATABLE READ, READ ONLY (every statement sees one
    moment, none can write). Committed on exit, unless a statement sent with its COMMIT
    (`query.run_and_commit`) ended it already; rolled back on any error. DatabaseUnavailable
    when the database cannot be reached."""
    with _connection(pool) as conn:
        try:
            yield _begin(
                conn, limits or Limits(), snapshot=snapshot, clock=clock, now=now, first=first
            )
        except BaseException:
            if not conn.closed and not conn.broken:
                conn.rollback()
            raise
        conn.commit()  # sends nothing when the transaction was committed already


def one_trip(
    pool: ConnectionPool, *statements: Statement, limits: Limits | None = None
) -> list[Any]:
    """A whole short transaction in one round trip: the per-transaction limits and the named
    `statements`, in order, as one simple query (parameters bound client-side: fine through
    PgBouncer), with no BEGIN or COMMIT: the server runs a simple query of several statements as
    one implicit transaction, so all commit or (on any error) none, and no lock it takes is held
    across a round trip. Returns what each one's cardinality promises, from its last statement.
    A parameter two of them name must have one value. Errors as for `transaction`."""
    params: dict[str, Any] = {**_limit_params(limits or Limits())}
    for name, statement_params in statements:
        clash = {k for k in set(statement_params) & set(params) if statement_params[k] != params[k]}
        assert not clash, f"{name} gives parameters other values: {clash}"
        params.update(statement_params)
    names = [name for name, _ in statements]
    sql = ";\n".join(query.QUERIES[name].sql for name in [_LIMITS, *names])
    with _connection(pool) as conn:
        cursor = psycopg.ClientCursor(conn)
        cursor.execute(sql, params)
        results = []
        before = query.statement_count(_LIMITS)  # past the limits, then each earlier one's last
        for name in names:
            results.append(query.last_result(cursor, name, before=before))
            before = 1
        return results


class Session:
    """One connection reused for transaction after transaction (the Client's): opened on first
    use; reopened after it broke and in a process forked from the one that opened it, where the
    parent's socket is left alone (psycopg only sends the goodbye from the process that opened
    it, so the parent's session lives on). No session state is ever set on it, so it works
    through PgBouncer in transaction mode. Threads take turns on it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: Conn | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _forked(self) -> None:
        """In a child of the process that opened the connection: forget it, never close it (a
        close would end the parent's session), and start with a lock no parent thread holds."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._conn = None
            self._lock = threading.Lock()

    @contextmanager
    def transaction(
        self,
        limits: Limits | None = None,
        *,
        now: datetime | None = None,
        first: Statement | None = None,
        snapshot: bool = False,
    ) -> Iterator[Tx]:
        """One short transaction on the reused connection, begun in one round trip that also
        sets the per-transaction limits, reads the database clock (`now` pins it: a test's time)
        and runs `first`, a named statement with its parameters (the first statement of the
        transaction, e.g. the parent lock; its result as its cardinality says): committed on
        success (unless `query.run_and_commit` ended it), rolled back on error. `snapshot`:
        REPEATABLE READ, READ ONLY, reading no clock (the console's audit). A connection
        found dead by that round trip (a server restart while it sat idle) is replaced once,
        since nothing was written yet; a connection lost later is DatabaseUnavailable, and the
        next transaction opens a new one."""
        self._forked()
        with self._lock:
            tx = self._open(limits or Limits(), now, first, snapshot)
            conn = tx.conn
            try:
                yield tx
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

    def _open(
        self, limits: Limits, now: datetime | None, first: Statement | None, snapshot: bool
    ) -> Tx:
        reused = self._conn is not None and not self._conn.closed
        if not reused:
            # autocommit: the transaction is begun by `_begin` itself, so BEGIN costs no round
            # trip of its own (psycopg's implicit BEGIN would).
            self._conn = connect(self.url, autocommit=True)
        conn = self._conn
        assert conn is not None
        try:
            return _begin(conn, limits, snapshot=snapshot, clock=not snapshot, now=now, first=first)
        except psycopg.OperationalError as exc:
            if not is_connection_error(exc):  # a lock or statement timeout in `first`
                self._end(conn, commit=False)
                raise
            self._discard()
            if not reused:
                raise DatabaseUnavailable(
                    f"lost the database connection: {first_line(exc)}"
                ) from exc
            # the idle connection had died: one fresh try
            return self._open(limits, now, first, snapshot)
        except BaseException:
            self._end(conn, commit=False)
            raise

    def _end(self, conn: Conn, *, commit: bool) -> None:
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


# The named BEGIN statements: with the limits; also reading the clock; a read-only snapshot;
# and the limits alone (an implicit transaction's first statement, or inside a transaction).
_BEGIN = "session_begin"
_BEGIN_CLOCK = "session_begin_clock"
_BEGIN_SNAPSHOT = "session_begin_snapshot"
_LIMITS = "session_limits"


def _begin(
    conn: Conn,
    limits: Limits,
    *,
    snapshot: bool,
    clock: bool,
    now: datetime | None,
    first: Statement | None,
) -> Tx:
    """Begins a transaction on the autocommit `conn` whose BEGIN carries the limits, with
    `clock` reads the clock, and sends `first` after them: one round trip, where
    `conn.transaction()` plus the limits took two (a `conn.transaction()` inside is a
    savepoint). Returns the transaction, with `first`'s result and the clock it read."""
    assert not (snapshot and clock), "no BEGIN reads the clock of a snapshot"
    assert clock or now is None, "a pinned time is the clock's: clock=True"
    params: dict[str, Any] = _limit_params(limits)
    if clock:
        begin, params = _BEGIN_CLOCK, {**params, "now": now}
    else:
        begin = _BEGIN_SNAPSHOT if snapshot else _BEGIN
    cursor = _send_begin(conn, begin, params, first)
    db_now = None
    if clock:
        row = cursor.fetchone()
        assert row is not None
        db_now = row["db_now"]
    return Tx(conn, _first_result(cursor, first), db_now)


def _send_begin(
    conn: Conn, begin: str, params: dict[str, Any], first: Statement | None
) -> psycopg.ClientCursor[DictRow]:
    """Sends the named BEGIN statements `begin` and `first` after them as one simple query (one
    round trip, parameters bound client-side: fine through PgBouncer, nothing is prepared);
    returns the cursor at the result of the BEGIN's last statement."""
    sql = query.QUERIES[begin].sql
    if first is not None:
        name, first_params = first
        overlap = {k for k in set(first_params) & set(params) if first_params[k] != params[k]}
        assert not overlap, f"{name} gives parameters of the BEGIN other values: {overlap}"
        sql = f"{sql};\n{query.QUERIES[name].sql}"
        params = {**params, **first_params}
    cursor = psycopg.ClientCursor(conn)
    cursor.execute(sql, params)
    cursor.nextset()  # past BEGIN's command status, to the limits (and the clock)
    return cursor


def _first_result(cursor: psycopg.ClientCursor[DictRow], first: Statement | None) -> Any:
    """What `first`'s cardinality promises, from its last statement (it may hold several)."""
    if first is None:
        return None
    while cursor.nextset():
        pass
    return query.result(cursor, query.QUERIES[first[0]].cardinality)


def make_pool(
    url: str, *, max_size: int, name: str, configure: Configure | None = None
) -> ConnectionPool:
    """A small pool for one daemon's loop, on a server that accepts writes (`read_write`), each
    new connection passed to `configure` before it is used (one that raises is discarded);
    opened lazily so a database that is down at start is retried by the caller instead of
    failing the constructor."""
    return ConnectionPool(
        read_write(url),
        configure=cast(Any, configure),  # dict rows (kwargs below); the pool's type can't say
        min_size=1,
        max_size=max_size,
        open=False,
        name=name,
        timeout=5.0,
        reconnect_timeout=5.0,
        kwargs={
            "row_factory": dict_row,
            "prepare_threshold": None,
            # Transactions are begun by `_begin` itself: BEGIN and the limits in one round trip.
            "autocommit": True,
            "connect_timeout": CONNECT_TIMEOUT_SECONDS,
            "application_name": name,
            **KEEPALIVES,
        },
    )


@contextmanager
def _connection(pool: ConnectionPool) -> Iterator[Conn]:
    """A pooled connection; DatabaseUnavailable when the database cannot be reached, or when
    it refuses a write as read-only (SQLSTATE 25006: a standby, or a primary demoted or turned
    read-only without dropping its connections): an outage like a lost connection, never a
    failed pass, and the connection is dropped so that the next one looks for a server that
    takes writes; what the pass could not write stays held (issue 32)."""
    try:
        with pool.connection() as conn:
            try:
                # make_pool's connections have dict rows; the pool's type can't say
                yield cast(Conn, conn)
            except psycopg.errors.ReadOnlySqlTransaction as exc:
                conn.close()  # the pool discards a closed connection
                raise DatabaseUnavailable(f"database is read-only: {first_line(exc)}") from exc
    except PoolTimeout as exc:
        raise DatabaseUnavailable(f"database unavailable: {first_line(exc)}") from exc
    except psycopg.OperationalError as exc:
        if not is_connection_error(exc):
            raise
        raise DatabaseUnavailable(f"database unavailable: {first_line(exc)}") from exc


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


def apply_limits(conn: Conn, limits: Limits) -> None:
    """Sets the per-transaction limits (SET LOCAL semantics) in a transaction begun without
    them (the lease keeper's own connection)."""
    query.run(conn, _LIMITS, _limit_params(limits))
