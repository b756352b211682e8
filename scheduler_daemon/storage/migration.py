"""Runs the alembic migrations shipped with the package under the compatibility contract
(ADR 0002): expand, contract, the compatibility record, offline SQL per step, revisions; at the
head, the live functions are kept equal to their files (storage/functions.py, ADR 0028)."""

import ast
import functools
import io
import socket
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.types.json import Jsonb

from scheduler_daemon.domain.instance import Instance
from scheduler_daemon.domain.schema_compat import (
    Build,
    Record,
    Step,
    Verdict,
    before_squash,
    judge_shape,
)
from scheduler_daemon.storage import functions, instance_store, presquash, query
from scheduler_daemon.storage.database import (
    CONNECT_TIMEOUT_SECONDS,
    KEEPALIVES,
    connect,
    read_write,
)
from scheduler_daemon.storage.error import (
    ContractBlocked,
    SchemaBehind,
    SchemaShapeDiffers,
    SchemaTooNew,
)
from scheduler_daemon.storage.resource import resource_dir
from scheduler_daemon.storage.shape import SHAPES, shape_of
from scheduler_daemon.version import __version__

if TYPE_CHECKING:
    from alembic.config import Config

VERSION_TABLE = "scheduler_daemon_alembic_version"
BASELINE = "0038"
"""The baseline (issue 45: revisions 0001-0037 squashed; a database at 0037 reaches it through
storage/presquash.py). Revisions up to it are `baseline` steps, which builds before it cannot
work with; every later revision declares `phase = "expand"` or `phase = "contract"`."""
# Any fixed 64-bit key; it spells "schemack" so it is recognisable in pg_locks.
COMPAT_LOCK_KEY = 0x736368656D61636B


DIALECT = "postgresql+psycopg://"
"""The SQLAlchemy URL alembic is given: the dialect alone. The connection itself comes from
`_alembic_connection`, opened by libpq from the URL as given, since SQLAlchemy's own URL parser
refuses a multi-host URL (`h1:5440,h2:5441`) and a keyword DSN that libpq reads."""


def _alembic_connection(url: str) -> psycopg.Connection[Any]:
    """A plain psycopg connection (tuple rows, as SQLAlchemy wants) with our connect settings."""
    return psycopg.connect(
        read_write(url),
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        application_name="scheduler-daemon migrate",
        **KEEPALIVES,
    )


def _command() -> ModuleType:
    """alembic's commands, imported when a migration runs: the daemon and most commands only
    read this build's revisions (`build`), and alembic with SQLAlchemy took 360 ms of every
    process start to import (a daemon's start, and a fleet of them starting at once)."""
    from alembic import command

    return command


def _config(url: str, output: io.StringIO | None = None) -> "Config":
    from alembic.config import Config

    cfg = Config(output_buffer=output) if output is not None else Config()
    cfg.set_main_option("script_location", str(resource_dir("migrations")))
    cfg.set_main_option("sqlalchemy.url", DIALECT)
    cfg.attributes["connect"] = functools.partial(_alembic_connection, url)  # migrations/env.py
    return cfg


@functools.cache
def build() -> Build:
    """This build's chain of steps, read once from the migration scripts' text (their revision,
    down_revision, phase and the first line of their docstring) without importing them or
    alembic; tests/unit/test_migration_scripts.py checks it against alembic's own walk."""
    scripts: dict[str | None, tuple[str, Any, str]] = {}  # by down_revision
    for path in sorted((resource_dir("migrations") / "versions").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        names = {
            node.targets[0].id: ast.literal_eval(node.value)
            for node in tree.body
            if isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in ("revision", "down_revision", "phase")
        }
        doc = (ast.get_docstring(tree) or "").strip().splitlines()
        parent = names.get("down_revision")
        if "revision" not in names or parent in scripts:
            raise RuntimeError(f"migration {path.name}: no revision, or a second child of {parent}")
        scripts[parent] = (names["revision"], names.get("phase"), doc[0] if doc else "")
    steps = []
    parent = None
    while parent in scripts:
        revision, phase, description = scripts.pop(parent)
        if revision <= BASELINE:
            steps.append(Step(revision, "baseline", description))
        elif phase in ("expand", "contract"):
            steps.append(Step(revision, phase, description))
        else:
            raise RuntimeError(f"migration {revision} declares no phase = 'expand' or 'contract'")
        parent = revision
    if scripts:
        raise RuntimeError(f"migrations off the chain: {sorted(s[0] for s in scripts.values())}")
    return Build(tuple(steps))


def known_revisions() -> list[str]:
    """The revisions of this build's chain, which its dispatch, claim and reconciler pass as
    `known` (ADR 0029): a task or occurrence whose `needs_build` names another is passed over."""
    return list(build().revisions)


def head_revision() -> str:
    """The newest revision this build knows."""
    return build().head


def current_revision(url: str) -> str | None:
    """The revision the database is at, None when it was never migrated."""
    with connect(url, autocommit=True) as conn:
        return _current(conn)


def _current(conn: psycopg.Connection[Any]) -> str | None:
    exists = conn.execute("SELECT to_regclass(%s) AS t", (VERSION_TABLE,)).fetchone()
    if exists is None or exists["t"] is None:
        return None
    row = conn.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchone()  # noqa: S608
    return None if row is None else row["version_num"]


def _record(conn: psycopg.Connection[Any], *, required: bool = False) -> Record | None:
    """The compatibility record; None where the schema has none. With `required` (a revision
    whose schema always holds fleet_setting), a missing table is a broken object, raised as the
    database error it is (a failed pass), never read as "no record"."""
    found = conn.execute(
        "SELECT to_regclass('fleet_setting') AS t, to_regclass('fleet_setting_shown') AS v"
    ).fetchone()
    if found is None or (found["t"] is None and not required):
        return None
    shown = found["v"] is not None  # the reader may not select fleet_setting.value (ADR 0031)
    value = query.run(conn, "schema_compat_record_shown" if shown else "schema_compat_record")
    if value is None:
        return None
    return Record(
        value["revision"],
        value["oldest_build"],
        tuple(value["contract_pending"]),
        value.get("shape"),
    )


@dataclass(frozen=True)
class SchemaState:
    current: str | None
    record: Record | None
    verdict: Verdict

    def fields(self) -> dict[str, Any]:
        """What `status` and `migrate --check --json` show of the schema."""
        mine = build()
        oldest = self.record.oldest_build if self.record else None
        if oldest is None and self.current is not None and mine.knows(self.current):
            oldest = mine.oldest_build_at(self.current)
        pending = list(self.record.contract_pending) if self.record else []
        return {
            "revision": self.current,
            "oldest_build": oldest,
            "contract_pending": pending,
            "this_build": mine.head,
            "this_build_needs": mine.needs,
            "this_build_compatible": self.verdict.ok,
            "shape": self.record.shape if self.record else None,
            "this_build_shape": SHAPES.get(self.current or ""),
        }


def state_of(conn: psycopg.Connection[Any], *, live: bool = False) -> SchemaState:
    """The schema's revision, record and this build's verdict. At a revision whose shape this
    build knows (SHAPES), the recorded shape is compared with it, and with `live` the shape the
    schema has now too (5 ms of catalog reads: `migrate`, a start, not every pass); another
    shape is the verdict, whatever the revision would allow."""
    current = _current(conn)
    expected = SHAPES.get(current or "")
    record = _record(conn, required=expected is not None)
    if expected is not None and current is not None:
        now = shape_of(conn) if live else None
        other = judge_shape(current, expected, record.shape if record else None, now)
        if other is not None:
            return SchemaState(current, record, other)
    return SchemaState(current, record, build().judge(current, record))


def state(url: str, *, live: bool = True) -> SchemaState:
    """`state_of` on a connection of its own, the present shape included unless `live` is
    False (`audit`, which reads history whatever index a bug or a hand dropped)."""
    with connect(url, autocommit=True) as conn:
        return state_of(conn, live=live)


def raise_unless_compatible(verdict: Verdict) -> None:
    if verdict.kind == "behind":
        raise SchemaBehind(verdict.message)
    if verdict.kind == "too_new":
        raise SchemaTooNew(verdict.message)
    if verdict.kind == "shape":
        raise SchemaShapeDiffers(verdict.message)


def check_before_write(conn: psycopg.Connection[Any]) -> None:
    """In the caller's transaction (a registration): waits for a contract in progress, then
    raises SchemaBehind, SchemaTooNew or SchemaShapeDiffers (the shape taken now included)
    unless this build can work with the schema."""
    query.run(conn, "schema_compat_lock_shared", {"key": COMPAT_LOCK_KEY})
    raise_unless_compatible(state_of(conn, live=True).verdict)


def _write_record(url: str, revision: str | None, pending: list[str], oldest: str | None) -> None:
    if revision is None:
        return  # downgraded to nothing: the table that held the record is gone
    with connect(url) as conn, conn.transaction():
        _set_record(conn, revision, pending, oldest)


def _set_record(
    conn: psycopg.Connection[Any], revision: str, pending: list[str], oldest: str | None
) -> None:
    value = {
        "revision": revision,
        "oldest_build": oldest,
        "contract_pending": pending,
        "shape": shape_of(conn),  # what the steps left, judged against SHAPES by the readers
    }
    query.run(
        conn,
        "schema_compat_record_set",
        {
            "value": Jsonb(value),
            "updated_by": f"migrate {__version__} (schema {head_revision()}) "
            f"on {socket.gethostname()}",
        },
    )


def _lock_exclusive(conn: psycopg.Connection[Any]) -> None:
    query.run(conn, "schema_compat_lock", {"key": COMPAT_LOCK_KEY})


def _pending_contract(revision: str | None) -> list[str]:
    return [s.revision for s in build().after(revision) if s.phase == "contract"]


def _refuse_what_no_step_fixes(url: str) -> SchemaState:
    """The schema's state, unless it is too new for this build or not the shape this build
    knows at its revision: refused before anything is written (the record, a step, a function),
    since no step of this build can bring it back."""
    found = state(url)
    if found.verdict.kind == "shape" or (
        found.current is not None and not build().knows(found.current)
    ):
        raise_unless_compatible(found.verdict)  # too new: nothing to do here, or refuse
    return found


def _past_the_squash(url: str) -> tuple[str, ...]:
    """A database at 0037 taken to the baseline (the fleet stopped, else ContractBlocked); one
    at an older pre-squash revision refused (SchemaBehind). The baseline when it was applied."""
    current = current_revision(url)
    if not presquash.needs_path(current, current is not None and build().knows(current)):
        return ()
    ran = presquash.migrate(
        url, BASELINE, _lock_exclusive, lambda conn: _set_record(conn, BASELINE, [], BASELINE)
    )
    return (BASELINE,) if ran else ()


def upgrade(url: str, revision: str = "head") -> None:
    """Applies every step up to `revision`, contract steps included, without the instance check
    of `contract` (tests, and the embedded server's first start); records the result. A database
    from before the squash takes its path first, with the instance check (the fleet stopped)."""
    _past_the_squash(url)
    _refuse_what_no_step_fixes(url)
    _command().upgrade(_config(url), revision)
    now = current_revision(url)
    _write_record(url, now, _pending_contract(now), build().oldest_build_at(now) if now else None)
    _functions_at_head(url, now)


def _functions_at_head(url: str, revision: str | None) -> tuple[str, ...]:
    """At this build's head, the functions whose file changed, re-created (ADR 0028); below
    it, nothing: a file may need a column of a step not applied yet."""
    return functions.refresh(url) if revision == build().head else ()


def downgrade(url: str, revision: str) -> None:
    found = state(url)
    if found.current is not None and before_squash(found.current):
        raise_unless_compatible(found.verdict)  # behind: `migrate` first, the fleet stopped
    _command().downgrade(_config(url), revision)
    now = current_revision(url)
    _write_record(url, now, _pending_contract(now), build().oldest_build_at(now) if now else None)


@dataclass(frozen=True)
class MigrateReport:
    before: str | None
    after: str | None
    applied: tuple[str, ...]
    contract_pending: tuple[str, ...]
    newer_than_this_build: bool = False
    functions: tuple[str, ...] = ()  # the files of sql/functions applied (ADR 0028)


def expand(url: str) -> MigrateReport:
    """`migrate`: the expand steps only, up to the first pending contract step. A schema newer
    than this build that still works with it is left alone."""
    bridged = _past_the_squash(url)
    found = _refuse_what_no_step_fixes(url)
    before = presquash.PRESQUASH_HEAD if bridged else found.current
    if found.current is not None and not build().knows(found.current):
        pending = found.record.contract_pending if found.record else ()
        return MigrateReport(before, before, (), pending, newer_than_this_build=True)
    if any(s.phase == "contract" for s in build().steps_to(found.current, build().needs)):
        # An earlier release's contract step sits before expand steps this build needs: it
        # runs first, under the contract's instance check (ADR 0002: the chain stays linear).
        return contract(url, target=build().needs)
    target = build().expand_target(found.current)
    applied: tuple[str, ...] = bridged
    if target is not None:
        # Expand steps leave the oldest allowed build where it was, so the record may follow.
        _command().upgrade(_config(url), target)
        revisions = [s.revision for s in build().after(found.current)]
        applied += tuple(revisions[: revisions.index(target) + 1])
    after = current_revision(url)
    left = _pending_contract(after)
    _write_record(url, after, left, build().oldest_build_at(after) if after else None)
    return MigrateReport(
        before, after, applied, tuple(left), functions=_functions_at_head(url, after)
    )


def incompatible_instances(conn: psycopg.Connection[Any], oldest: str) -> list[Instance]:
    """Registered instances (live, or not yet expired) of builds older than `oldest`."""
    return [
        row
        for row in instance_store.list_instances(conn)
        if not build().works_after(row.schema_revision, oldest)
    ]


def instances_before(conn: psycopg.Connection[Any], revision: str) -> list[Instance]:
    """Registered instances (live, or not yet expired) of builds whose schema head is before
    `revision`, read after taking the compatibility lock for the transaction: a registration in
    progress is waited for and seen here, and a later one waits until this transaction ends, so
    what the transaction writes next is judged against every registration before it."""
    cursor = psycopg.ClientCursor(conn)  # both statements in one round trip
    name = "instance_before_revision"
    cursor.execute(query.QUERIES[name].sql, {"key": COMPAT_LOCK_KEY, "revision": revision})
    return [Instance.from_row(row) for row in query.last_result(cursor, name, before=0)]


def contract(url: str, target: str | None = None) -> MigrateReport:
    """`migrate --contract`: every pending step up to `target` (default: the head), contract
    steps included; refused, naming them and the instances, while an instance of a build they
    would break is registered."""
    _past_the_squash(url)
    found = _refuse_what_no_step_fixes(url)
    before = found.current
    if before is not None and not build().knows(before):
        raise SchemaTooNew(
            f"the database schema is at {before}, newer than this build (schema {head_revision()}"
            "): run `migrate --contract` with the newest build"
        )
    target = target or build().head
    steps = build().steps_to(before, target)
    if not steps:
        left = tuple(_pending_contract(before))
        return MigrateReport(before, before, (), left, functions=_functions_at_head(url, before))
    oldest_after = build().oldest_build_at(target)
    contracts = [s.revision for s in steps if s.phase == "contract"]
    with connect(url) as guard, guard.transaction():
        if before is not None:
            _lock_exclusive(guard)
            blocking = incompatible_instances(guard, oldest_after)
            if blocking:
                names = ", ".join(
                    f"{row.id} (version {row.version}, schema {row.schema_revision})"
                    for row in blocking
                )
                raise ContractBlocked(
                    f"contract step(s) {', '.join(contracts)} would break instance(s) {names}, "
                    f"which need builds from schema {oldest_after} on; roll them to this build "
                    "(or wait until a stopped one's row expires), then run `migrate --contract` "
                    "again"
                )
            # The raised oldest build is visible before the first contract step commits.
            _write_record(url, before, contracts, oldest_after)
        try:
            _command().upgrade(_config(url), target)
        except BaseException:
            if before is not None:
                now = current_revision(url)
                oldest = build().oldest_build_at(now) if now else None
                _write_record(url, now, _pending_contract(now), oldest)
            raise
    after = current_revision(url)
    pending = _pending_contract(after)
    _write_record(url, after, pending, oldest_after)
    applied = tuple(s.revision for s in steps)
    refreshed = _functions_at_head(url, after)
    return MigrateReport(before, after, applied, tuple(pending), functions=refreshed)


def offline_steps() -> list[tuple[Step, str]]:
    """Each step with the SQL it runs, without touching a database (`migrate --sql`)."""
    found: list[tuple[Step, str]] = []
    previous: str | None = None
    for step in build().steps:
        output = io.StringIO()
        span = step.revision if previous is None else f"{previous}:{step.revision}"
        _command().upgrade(_config("", output), span, sql=True)
        found.append((step, output.getvalue()))
        previous = step.revision
    return found


def offline_sql() -> str:
    """The SQL of every step, each headed by its revision and phase, then the files of the live
    functions, which `migrate` applies at the head where they differ (ADR 0028)."""
    steps = [
        f"-- step {step.revision} ({step.phase}): {step.description}\n{sql}"
        for step, sql in offline_steps()
    ]
    files = [
        f"-- function {each.file} (at the head, where it differs)\n{each.text}"
        for each in functions.files()
    ]
    path = [
        f"-- from {presquash.PRESQUASH_HEAD} (pre-release databases, instead of the baseline)\n"
        + presquash.path_module().sql()
    ]
    return "\n".join(steps + files + path)
