"""What every part of the Client shares: its one reused connection, a TASK argument as the
stores look it up, a refusal raised, and a page of rows."""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from scheduler_daemon.domain import argument, control
from scheduler_daemon.domain import limit as bound
from scheduler_daemon.storage.database import Conn, Session
from scheduler_daemon.storage.error import Conflict, NotFound

Plan = TypeVar("Plan")
Row = TypeVar("Row")

PAGE_SIZE = 100
"""`tasks list` and `runs list` print a first page of this many rows by default."""
ALL_PAGE_SIZE = 1000
"""`--all` reads the history this many rows per transaction."""


@dataclass(frozen=True)
class Page:
    """Rows of one page, and the cursor that continues after them (None: this was the last)."""

    rows: list[Any]
    after: str | None


class ClientBase:
    """The connection the Client's parts share: one, opened on first use, reused by every call
    and shared by threads in turn (`Client` says more)."""

    def __init__(self, database_url: str | None = None) -> None:
        if database_url is None:
            from scheduler_daemon.settings import resolve_database_url

            database_url = resolve_database_url(None)
        self.database_url = database_url
        self._session = Session(database_url)

    def close(self) -> None:
        """Closes the connection; a later call opens a new one."""
        self._session.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[Conn]:
        with self._session.transaction() as tx:
            yield tx.conn


def check_limit(limit: int | None) -> None:
    """A page's `--limit`: at least one, and within an int4."""
    if limit is not None:
        argument.at_least_one(limit, "--limit")
        argument.count_within(limit, "--limit", bound.INT4_MAX)


def allowed(plan: Plan | control.Refusal) -> Plan:
    """The plan, or the refusal raised as a Conflict (exit code 2 in the CLI)."""
    if isinstance(plan, control.Refusal):
        raise Conflict(plan.message)
    return plan


def task_ref(ref: str | int) -> str | int:
    """A TASK argument as the stores look it up; NotFound when no task can have it (an id past
    bigint, a NUL in a name: domain.argument.task_ref)."""
    looked_up = argument.task_ref(ref)
    if looked_up is None:
        raise NotFound(f"unknown task {str(ref)!r}")
    return looked_up


def found(row: Row | None, what: str) -> Row:
    """What a look-up found; NotFound (`unknown {what}`) when it found nothing."""
    if row is None:
        raise NotFound(f"unknown {what}")
    return row
