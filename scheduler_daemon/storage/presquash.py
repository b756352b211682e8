"""Databases from before the squash (issue 45, ADR 0027 point 5): revisions 0001-0037 became
the baseline 0038. A database at 0037 reaches it through `migrations/from_0037.py`, run here
by `migrate` with the fleet stopped; one at an older revision is told to reach 0037 first with
a build from before the squash."""

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg

from scheduler_daemon.domain.schema_compat import PRESQUASH_HEAD, before_squash
from scheduler_daemon.storage import instance_store
from scheduler_daemon.storage.database import connect
from scheduler_daemon.storage.error import ContractBlocked, SchemaBehind
from scheduler_daemon.storage.resource import resource_dir

LAST_BUILD = "61278d7"
"""A commit of main from before the squash, whose `migrate` reaches 0037 from any older one."""
REFUSED_DOWNGRADE = (
    "the history before the baseline was squashed (issue 45): restore the backup taken before "
    f"`migrate`, or use a build from before the squash ({LAST_BUILD})"
)


def path_module() -> ModuleType:
    """migrations/from_0037.py, loaded by path: it is outside versions/ so alembic never sees
    it, and outside the package so it ships with the migrations (pyproject force-include)."""
    return _loaded(resource_dir("migrations") / "from_0037.py", "scheduler_daemon_from_0037")


def baseline_module() -> ModuleType:
    """migrations/versions/0038_baseline.py, loaded by path (versions/ is no package): the path
    from 0037 creates its VIEWS too, written once."""
    path = resource_dir("migrations") / "versions" / "0038_baseline.py"
    return _loaded(path, "scheduler_daemon_baseline_0038")


def _loaded(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"no {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def needs_path(current: str | None, knows: bool) -> bool:
    """Whether a database at `current` is from before the squash; raises SchemaBehind (exit 4)
    when it is, but not at 0037, where the path starts."""
    if current is None or knows or not before_squash(current):
        return False
    if current != PRESQUASH_HEAD:
        raise SchemaBehind(
            f"the database schema is at {current}, from before the squash: migrate it to "
            f"{PRESQUASH_HEAD} with a build from before the squash ({LAST_BUILD}) first, then "
            "run `scheduler-daemon migrate` with this build"
        )
    return True


Step = Callable[[psycopg.Connection[Any]], None]


def migrate(url: str, baseline: str, lock: Step, record: Step) -> bool:
    """Runs the path from 0037 to `baseline` in one transaction after `lock` (the exclusive
    compatibility lock), refused (ContractBlocked, exit 6) while any instance is registered: the
    fleet must be stopped; `record` writes the compatibility record in the same transaction.
    Returns False when another `migrate` ran it first."""
    with connect(url) as conn, conn.transaction():
        lock(conn)
        if _version(conn) != PRESQUASH_HEAD:
            return False
        registered = instance_store.list_instances(conn)
        if registered:
            names = ", ".join(
                f"{row.id} (version {row.version}, schema {row.schema_revision})"
                for row in registered
            )
            raise ContractBlocked(
                f"the path from {PRESQUASH_HEAD} to {baseline} needs the fleet stopped, and "
                f"instance(s) {names} are registered: stop them (or wait until a stopped one's "
                "row expires), then run `migrate` again"
            )
        for statement in path_module().statements():
            conn.execute(statement)
        record(conn)
    return True


def _version(conn: psycopg.Connection[Any]) -> str | None:
    row = conn.execute(
        "SELECT version_num FROM scheduler_daemon_alembic_version FOR UPDATE"
    ).fetchone()
    return None if row is None else row["version_num"]
