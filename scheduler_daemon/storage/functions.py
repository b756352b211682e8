"""Keeps the live SQL functions equal to their files, `sql/functions/*.sql` (ADR 0028): once a
migration reaches this build's head, each function whose recorded checksum differs from its
file's is created again from the file, in one transaction.

The record is the function's comment: the file's sha256 and the sha256 of the definition the
server made of it (`pg_get_functiondef`, as the schema snapshot renders it), so a file edited
since and a function changed by hand are both seen. Nothing is written when every record holds.
"""

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import structlog
from psycopg import sql

from scheduler_daemon.storage import query
from scheduler_daemon.storage.database import Limits, apply_limits, connect
from scheduler_daemon.storage.resource import resource_dir

log = structlog.get_logger(__name__)

# Any fixed 64-bit key; it spells "sdfuncs!" so it is recognisable in pg_locks. Two `migrate`
# runs at once re-create one after the other, and the second finds the records written.
FUNCTIONS_LOCK_KEY = 0x736466756E637321
LIMITS = Limits(lock_timeout="5s", statement_timeout="60s")
# `CREATE OR REPLACE FUNCTION name(arg type, ...)`: arguments are `name type`, no defaults.
_CREATE = re.compile(r"^CREATE OR REPLACE FUNCTION (\w+)\(([^)]*)\)", re.MULTILINE)


@dataclass(frozen=True)
class FunctionFile:
    """One file of sql/functions: the one function it creates, and the statements that do it."""

    file: str
    name: str
    signature: str  # name(type, ...), as to_regprocedure reads it
    text: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def create_and_record(self) -> str:
        """The file's statements, then a DO block recording them in the function's comment as
        `record` does, the definition's checksum taken by the server (`pg_get_functiondef` in
        UTF-8, as this session reads it): SQL alone, so a migration may run it, online or as
        `--sql` (the baseline and the path from 0037)."""
        prefix = f"from sql/functions/{self.file} sha256:{self.checksum}; definition sha256:"
        return (
            f"{self.text}\n\nDO $record$\nDECLARE f regprocedure := "
            f"to_regprocedure(quote_ident(current_schema()) || '.{self.signature}');\n"
            "BEGIN\n    EXECUTE format('COMMENT ON FUNCTION %s IS %L', f, "
            f"'{prefix}' || encode(sha256(convert_to(pg_get_functiondef(f), 'UTF8')), 'hex'));\n"
            "END\n$record$;\n"
        )

    def record(self, definition: str) -> str:
        """The comment of a function made from this file, whose definition is `definition`."""
        made = hashlib.sha256(definition.encode()).hexdigest()
        return f"from sql/functions/{self.file} sha256:{self.checksum}; definition sha256:{made}"


def read(path: Path) -> FunctionFile:
    text = path.read_text(encoding="utf-8")
    found = _CREATE.findall(text)
    if len(found) != 1:
        raise RuntimeError(f"sql/functions/{path.name} creates {len(found)} functions, not one")
    name, arguments = found[0]
    types = [argument.split(None, 1)[1] for argument in arguments.split(",") if argument.strip()]
    return FunctionFile(path.name, name, f"{name}({', '.join(types)})", text)


def files(folder: Path | None = None) -> list[FunctionFile]:
    """Every file of sql/functions (shipped in the wheel beside sql/), in name order: each
    is a CREATE OR REPLACE, and the one LANGUAGE sql function reads tables only."""
    paths = sorted((folder or resource_dir("sql") / "functions").glob("*.sql"))
    if not paths:
        raise FileNotFoundError("scheduler-daemon is installed without its sql/functions/ files")
    return [read(path) for path in paths]


def _live(conn: psycopg.Connection[Any], found: list[FunctionFile]) -> dict[str, Any]:
    rows = query.run(conn, "schema_functions", {"signatures": [f.signature for f in found]})
    return {row["signature"]: row for row in rows}


def stale(conn: psycopg.Connection[Any], found: list[FunctionFile]) -> list[FunctionFile]:
    """The files whose function is missing from the current schema, or whose record differs."""
    live = _live(conn, found)
    return [
        f
        for f in found
        if live[f.signature]["definition"] is None
        or live[f.signature]["comment"] != f.record(live[f.signature]["definition"])
    ]


def refresh(url: str, folder: Path | None = None) -> tuple[str, ...]:
    """Re-creates, in one transaction, each function whose file changed (or whose definition
    was changed by hand) and records it; returns the files applied, none when all were equal."""
    found = files(folder)
    with connect(url) as conn, conn.transaction():
        apply_limits(conn, LIMITS)
        query.run(conn, "schema_functions_lock", {"key": FUNCTIONS_LOCK_KEY})
        changed = stale(conn, found)
        for each in changed:
            conn.execute(each.text)  # no parameters: the file's statements as they are
            made = _live(conn, [each])[each.signature]
            conn.execute(
                sql.SQL("COMMENT ON FUNCTION {} IS {}").format(
                    sql.SQL(made["regprocedure"]), sql.Literal(each.record(made["definition"]))
                )
            )
            log.info("function_recreated", function=each.name, file=each.file)
    return tuple(each.file for each in changed)
