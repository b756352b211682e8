"""What every part of the Client shares: its one reused connection, a TASK argument as the
stores look it up, a refusal raised, and a page of rows."""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from scheduler_daemon.domain import argument, control
from scheduler_daemon.domain import limit as bound
from scheduler_daemon.storage import migration
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


def mark_if_older(conn: Conn, revision: str | None) -> str | None:
    """The `needs_build` of a write that needs the build of `revision` (ADR 0029): the revision
    while an instance of an older build is registered, so that build's dispatch, claim and
    reconciler pass the rows over; None (any build may run them) otherwise, or when `revision`
    is None. Judged under the compatibility lock for the caller's transaction
    (`migration.instances_before`): a registration in progress is seen."""
    if revision is None:
        return None
    return revision if migration.instances_before(conn, revision) else None


def refuse_if_older(conn: Conn, key: str) -> None:
    """Raises Conflict (exit 2) when the fleet setting `key` needs a build (control.NEEDS)
    older than some registered instance's: a fleet setting cannot be marked (ADR 0029)."""
    revision = control.NEEDS.get(key)
    older = migration.instances_before(conn, revision) if revision is not None else []
    if revision is not None and older:
        allowed(control.older_build_refusal(key, revision, [row.id for row in older]))


def task_needs(conn: Conn, spec: Any) -> str | None:
    """The `needs_build` of a write of task definition `spec`: what control.NEEDS says it
    needs, marked only while an older build is registered (`mark_if_older`)."""
    return mark_if_older(conn, control.task_needs(spec, migration.known_revisions()))


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
