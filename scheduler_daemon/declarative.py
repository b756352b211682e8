"""`tasks apply`: make the tasks of one source match a task file, in one transaction.

The source (the file's `source = ...`, `--source`, or the file's name) is recorded on each task
it creates; `--prune` deletes the tasks of that source that the file no longer names. A task of
the same name made by hand or by another source is left alone when the file defines it exactly as
it is, taken over with `adopt`, and otherwise refused, which changes nothing. Every change goes
through the Client's own add, update, pause and delete, under the task locks, in name order.
"""

import contextlib
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from scheduler_daemon.client import Client
from scheduler_daemon.domain.status import TaskStatus
from scheduler_daemon.domain.task import InvalidTask, TaskRecord, TaskSpec
from scheduler_daemon.domain.task_file import keep_masked
from scheduler_daemon.storage import task_store
from scheduler_daemon.storage.error import Conflict

# Fields that are not the definition: the name is the key, the anchor is the database's.
_IGNORED = {"name", "anchor"}


@dataclass(frozen=True)
class Change:
    """One line of the diff: `+` added, `~` changed (with the fields), `-` deleted (or, without
    prune, would be deleted)."""

    mark: str
    name: str
    fields: tuple[str, ...] = ()
    note: str = ""

    def text(self) -> str:
        label = {"+": "added", "~": "changed", "-": "deleted"}[self.mark]
        detail = f": {', '.join(self.fields)}" if self.fields else ""
        return f"{self.mark} {self.note or label} {self.name}{detail}"


def differences(old: TaskSpec, new: TaskSpec) -> dict[str, Any]:
    """The fields of `new` that differ from `old`."""
    return {
        f.name: getattr(new, f.name)
        for f in fields(TaskSpec)
        if f.name not in _IGNORED and _same(f.name, old) != _same(f.name, new)
    }


def _same(name: str, spec: TaskSpec) -> Any:
    """A field's value as compared: headers as a mapping (the database keeps no key order)."""
    value = getattr(spec, name)
    headers = ("headers", "header_refs", "notify_headers", "notify_header_refs")
    return dict(value) if name in headers else value


def apply(
    client: Client,
    specs: dict[str, TaskSpec],
    *,
    source: str,
    prune: bool = False,
    adopt: bool = False,
    dry_run: bool = False,
    requested_by: str,
    now: datetime | None = None,
) -> list[Change]:
    """Creates and updates tasks to match `specs`; the diff, in name order. With `dry_run` the
    transaction is rolled back after planning, so the diff is exactly what would happen."""
    changes: list[Change] = []
    with contextlib.suppress(_RolledBack):  # a dry run: everything it did is undone
        _plan(client, specs, changes, source, prune, adopt, dry_run, requested_by, now)
    return sorted(changes, key=lambda c: (c.name, c.mark))


class _RolledBack(Exception):
    """Raised inside the transaction to undo a dry run."""


def _plan(  # noqa: PLR0917 - the options of apply, passed through
    client: Client,
    specs: dict[str, TaskSpec],
    changes: list[Change],
    source: str,
    prune: bool,
    adopt: bool,
    dry_run: bool,
    requested_by: str,
    now: datetime | None,
) -> None:
    with client._tx() as conn:  # one transaction: all of the file or nothing
        live = {t.name: t for t in task_store.list_live(conn)}
        for name in sorted(specs):
            current = live.get(name)
            spec = keep_masked(specs[name], current.spec if current else None, name)
            if current is None:
                client.add_in(conn, spec, now=now, source=source)
                changes.append(Change("+", name))
                continue
            resolved, skips = spec.resolved()  # a local `at` as the instant it stands for
            diff = differences(current.spec, resolved)
            if "at" in diff or (skips and current.status == TaskStatus.ENABLED):
                # As given: update_in reads a local one by the policies, and records the firing
                # of one a gap skips (its instant may equal the stored one: the gap's end).
                diff["at"] = spec.at
            owned = current.source == source
            if not owned and not adopt:
                if not diff:
                    continue  # defined exactly as it is: nothing to take over
                maker = "by hand" if current.source is None else f"by source {current.source!r}"
                raise Conflict(
                    f"task '{name}' was made {maker}; --adopt takes it over for {source!r}, "
                    "or rename it in the file"
                )
            if not diff and owned:
                continue
            _update(client, conn, current, diff, source=source, now=now)
            changes.append(Change("~", name, tuple(sorted(diff)), "" if owned else "adopted"))
        gone = sorted(n for n, t in live.items() if t.source == source and n not in specs)
        for name in gone:
            if prune:
                try:
                    client.delete_in(conn, live[name].id, requested_by=requested_by, now=now)
                except Conflict as exc:
                    raise Conflict(f"--prune: {exc}") from exc
            changes.append(Change("-", name, (), "deleted" if prune else "would delete"))
        if dry_run:
            raise _RolledBack


def _update(
    client: Client,
    conn: Any,
    current: TaskRecord,
    diff: dict[str, Any],
    *,
    source: str,
    now: datetime | None,
) -> None:
    """The definition fields through update_in, a pause or resume through their own rules."""
    paused = diff.pop("paused", None)
    try:
        client.update_in(conn, current.id, now=now, source=source, **diff)
        if paused is True:
            client.pause_in(conn, current.id, now=now)
        elif paused is False:
            client.resume_in(conn, current.id, now=now)
    except InvalidTask as exc:
        raise InvalidTask(f"task '{current.name}': {exc}") from exc
    except Conflict as exc:
        raise Conflict(f"task '{current.name}': {exc}") from exc
