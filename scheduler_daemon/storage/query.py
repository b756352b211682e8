"""Loads the named SQL statements in `sql/*.sql` once, and runs them by name with a cardinality.

A file holds blocks of the form::

    -- name: task_insert :one
    -- Inserts a task and returns it.
    INSERT INTO task ...;

Cardinalities: `:one` (a row or None), `:many` (all rows), `:scalar` (first column of the first row
or None), `:rowcount` (number of rows touched: a fenced write learns it lost from a 0).

A block headed `-- fragment: run_row` is no statement: it is text that statements of any file
include as `{{run_row}}` (one column list several statements select, written once); a fragment
may include others. An unknown, unused or circular fragment is an error.
"""

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from scheduler_daemon.storage.resource import resource_dir

CARDINALITIES = ("one", "many", "scalar", "rowcount")
_HEADER = re.compile(r"^--\s*name:\s*(?P<name>[a-z][a-z0-9_]*)\s+:(?P<card>[a-z]+)\s*$")
_FRAGMENT_HEADER = re.compile(r"^--\s*fragment:\s*(?P<name>[a-z][a-z0-9_]*)\s*$")
_INCLUDE = re.compile(r"\{\{(?P<name>[a-z][a-z0-9_]*)\}\}")
FRAGMENT = "fragment"  # the cardinality a fragment block is parsed with


class QueryError(RuntimeError):
    """The query files are malformed: a duplicate name, an unknown cardinality or an empty body."""


@dataclass(frozen=True)
class Query:
    name: str
    cardinality: str
    doc: str
    sql: str
    source: str


def parse(text: str, source: str) -> list[Query]:
    """Splits one file into its named statements."""
    queries: list[Query] = []
    name = card = None
    doc: list[str] = []
    body: list[str] = []

    def flush() -> None:
        if name is None:
            if "".join(body).strip():
                raise QueryError(f"{source}: SQL before the first '-- name:' header")
            return
        sql = "\n".join(body).strip().rstrip(";").strip()
        if not sql:
            raise QueryError(f"{source}: query {name} has no statement")
        queries.append(Query(name, card or "", " ".join(doc), sql, source))

    for line in text.splitlines():
        header = _HEADER.match(line.strip())
        fragment = _FRAGMENT_HEADER.match(line.strip())
        if header:
            flush()
            name, card = header["name"], header["card"]
            if card not in CARDINALITIES:
                raise QueryError(f"{source}: query {name} has unknown cardinality :{card}")
            doc, body = [], []
        elif fragment:
            flush()
            name, card = fragment["name"], FRAGMENT
            doc, body = [], []
        elif name is not None and not body and line.strip().startswith("--"):
            doc.append(line.strip()[2:].strip())
        else:
            body.append(line)
    flush()
    return queries


def load(directory: Path) -> dict[str, Query]:
    """Every query of every `*.sql` file in `directory`, by name; duplicates are an error."""
    found: dict[str, Query] = {}
    for path in sorted(directory.glob("*.sql")):
        if path.name == "schema.sql":  # the generated schema snapshot, not named queries
            continue
        for query in parse(path.read_text(encoding="utf-8"), path.name):
            if query.name in found:
                first = found[query.name].source
                raise QueryError(f"query {query.name} is defined in {first} and {query.source}")
            found[query.name] = query
    fragments = {n: q.sql for n, q in found.items() if q.cardinality == FRAGMENT}
    used: set[str] = set()

    def include(match: re.Match[str]) -> str:
        if match["name"] not in fragments:
            raise QueryError(f"unknown fragment {{{{{match['name']}}}}}")
        used.add(match["name"])
        return fragments[match["name"]]

    for _ in fragments:  # a fragment may include others: as deep as there are fragments
        fragments = {n: _INCLUDE.sub(include, sql) for n, sql in fragments.items()}
    if circular := sorted(n for n, sql in fragments.items() if _INCLUDE.search(sql)):
        raise QueryError(f"fragment(s) {', '.join(circular)} include themselves")
    statements = {
        n: Query(q.name, q.cardinality, q.doc, _INCLUDE.sub(include, q.sql), q.source)
        for n, q in found.items()
        if q.cardinality != FRAGMENT
    }
    if unused := set(fragments) - used:
        raise QueryError(f"fragment(s) {', '.join(sorted(unused))} included by no statement")
    return statements


QUERIES: dict[str, Query] = load(resource_dir("sql"))


def run(conn: psycopg.Connection[Any], name: str, params: dict[str, Any] | None = None) -> Any:
    """Executes the query `name` on `conn` and returns what its cardinality promises."""
    query = QUERIES[name]
    return result(conn.execute(query.sql, params or {}), query.cardinality)


def run_and_commit(
    conn: psycopg.Connection[Any], name: str, params: dict[str, Any] | None = None
) -> Any:
    """Executes the query `name` as its transaction's last statement, COMMIT sent with it: one
    simple query, so one round trip (parameters bound client-side: nothing is prepared, fine
    through PgBouncer). An error in the statement leaves the COMMIT unrun and the transaction
    failed, for the caller's rollback. Returns what the query's cardinality promises, from its
    last statement."""
    cursor = psycopg.ClientCursor(conn)
    cursor.execute(f"{QUERIES[name].sql};\nCOMMIT", params or {})
    return last_result(cursor, name, before=0)


_SAVEPOINT = "unit"


def run_in_savepoint(
    conn: psycopg.Connection[Any], name: str, params: dict[str, Any] | None = None
) -> Any:
    """Executes the query `name` in a savepoint of its own sent with it (one round trip, where
    psycopg's `conn.transaction()` takes three), inside an open transaction. On an error the
    server reported, the transaction is rolled back to that savepoint, so it goes on without
    the query's writes, and the error is raised. The savepoint is released when the transaction
    ends. Returns what the query's cardinality promises, from its last statement."""
    cursor = psycopg.ClientCursor(conn)
    try:
        cursor.execute(f"SAVEPOINT {_SAVEPOINT};\n{QUERIES[name].sql}", params or {})
    except psycopg.Error:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            conn.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
        raise
    return last_result(cursor, name, before=1)


@functools.cache
def statement_count(name: str) -> int:
    """How many statements the named query holds (they are separated by ';' and a newline)."""
    return QUERIES[name].sql.count(";\n") + 1


def last_result(cursor: Any, name: str, *, before: int) -> Any:
    """What the named query's cardinality promises, from its last statement, on a cursor at
    the first result of a simple query that sent `before` statements ahead of it."""
    for _ in range(before + statement_count(name) - 1):
        cursor.nextset()
    return result(cursor, QUERIES[name].cardinality)


def result(cursor: Any, cardinality: str) -> Any:
    """What a statement's `cardinality` promises, from the cursor that ran it."""
    if cardinality == "rowcount":
        return cursor.rowcount
    if cardinality == "many":
        return cursor.fetchall()
    row = cursor.fetchone()
    if cardinality == "one":
        return row
    if row is None:
        return None
    return next(iter(row.values())) if isinstance(row, dict) else row[0]
