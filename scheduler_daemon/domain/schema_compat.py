"""Which builds can work with which schema (ADR 0002): pure judgement over revision chains.

A build knows its own chain of migration steps, oldest first. Each step is `baseline` (released
before the contract existed: builds before it cannot work with it), `expand` (additive: builds
that predate it keep working) or `contract` (destructive: only builds that know it may write
after it). The database records, besides the applied revision, the oldest build head allowed to
write (`oldest_build`), the contract steps still pending, and the shape of the schema it left
(a digest of its tables, columns, constraints, indexes, triggers and views: ADR 0027, "as
built"), which a build compares with the shape it knows for that revision.
"""

from dataclasses import dataclass
from typing import Literal

Phase = Literal["baseline", "expand", "contract"]
Kind = Literal["ok", "behind", "too_new", "shape"]

PRESQUASH_HEAD = "0037"
"""The last revision before the squash (issue 45): 0001-0037 became the baseline 0038."""


def before_squash(revision: str) -> bool:
    """A revision id of the chain squashed into the baseline ('0001' to '0037'): such an
    instance's build or such a schema is older than every build of the baseline."""
    return len(revision) == 4 and revision.isdigit() and revision <= PRESQUASH_HEAD


@dataclass(frozen=True)
class Step:
    revision: str
    phase: Phase
    description: str = ""


@dataclass(frozen=True)
class Record:
    """What `migrate` wrote into the database about the schema's compatibility."""

    revision: str
    oldest_build: str
    contract_pending: tuple[str, ...] = ()
    shape: str | None = None  # None: recorded by a build from before the shape (issue 47)


@dataclass(frozen=True)
class Verdict:
    kind: Kind
    message: str

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


def short(digest: str | None) -> str:
    """A shape digest as messages show it: its first 12 hex digits."""
    return digest[:12] if digest else "none recorded"


RECREATE_HOW = (
    "drop and create the database; the embedded one: `scheduler-daemon db stop`, then delete its "
    "data directory"
)
"""How to recreate a database; the CLI names the directory when it used the embedded server."""
RECREATE = f"recreate it ({RECREATE_HOW}) or use the build that made it"


def judge_shape(
    revision: str, expected: str, recorded: str | None, live: str | None = None
) -> Verdict | None:
    """Whether a schema at `revision`, whose shape this build knows (`expected`), is that shape:
    None when it is, else why not. `recorded` is what `migrate` recorded (None: nothing, as
    before issue 47), `live` the digest taken now (None: not taken). A database at a revision
    this build knows but of another shape was made by an unreleased build whose schema step at
    that revision differed (until 1.0.0 the baseline is edited in place), or changed by hand."""
    if recorded != expected:
        return Verdict(
            "shape",
            f"the database at {revision} was made by an unreleased build with another schema "
            f"(shape {short(recorded)}, this build's {short(expected)}): {RECREATE}",
        )
    if live is not None and live != expected:
        return Verdict(
            "shape",
            f"the database at {revision} records this build's schema (shape {short(expected)}) "
            f"but has another (shape {short(live)}): a table, column, constraint, index, "
            "trigger or view was changed since `migrate` made it; restore it as "
            "`scheduler-daemon migrate --sql` creates it, or recreate the database",
        )
    return None


@dataclass(frozen=True)
class Build:
    """One build's chain of steps; its head is the last."""

    steps: tuple[Step, ...]

    @property
    def head(self) -> str:
        return self.steps[-1].revision

    @property
    def revisions(self) -> tuple[str, ...]:
        """Every revision of the chain, oldest first: what this build knows (ADR 0029)."""
        return tuple(s.revision for s in self.steps)

    def knows(self, revision: str) -> bool:
        return any(s.revision == revision for s in self.steps)

    def index(self, revision: str) -> int:
        return next(i for i, s in enumerate(self.steps) if s.revision == revision)

    @property
    def needs(self) -> str:
        """The newest step this build cannot run without: its last baseline or expand step.
        Contract steps after it may be pending."""
        return next(s.revision for s in reversed(self.steps) if s.phase != "contract")

    def oldest_build_at(self, revision: str) -> str:
        """The oldest build head allowed to write once the chain is applied up to `revision`:
        raised by baseline and contract steps, left alone by expand steps."""
        oldest = self.steps[0].revision
        for step in self.steps[: self.index(revision) + 1]:
            if step.phase != "expand":
                oldest = step.revision
        return oldest

    def after(self, revision: str | None) -> tuple[Step, ...]:
        """The steps not yet applied on a schema at `revision` (None: nothing applied)."""
        return self.steps if revision is None else self.steps[self.index(revision) + 1 :]

    def steps_to(self, revision: str | None, target: str) -> tuple[Step, ...]:
        """The steps not yet applied on a schema at `revision`, up to `target` included."""
        pending = self.after(revision)
        names = [s.revision for s in pending]
        return pending[: names.index(target) + 1] if target in names else ()

    def expand_target(self, revision: str | None) -> str | None:
        """How far `migrate` (expand only) goes from `revision`: up to the step before the first
        pending contract step. None when it would apply nothing."""
        target = None
        for step in self.after(revision):
            if step.phase == "contract":
                break
            target = step.revision
        return target

    def works_after(self, instance_head: str, oldest_build: str) -> bool:
        """Whether a build at `instance_head` may write to a schema whose oldest allowed build
        is `oldest_build`. A head this build does not know is a newer build, which may, unless
        it is from before the squash (issue 45): older than any it allows."""
        if not self.knows(instance_head):
            return not before_squash(instance_head)
        return self.index(instance_head) >= self.index(oldest_build)

    def judge(self, current: str | None, record: Record | None) -> Verdict:
        """Can this build work with a schema at `current`?"""
        head = self.head
        if current is None:
            return Verdict(
                "behind",
                f"the database schema is at nothing, this build (schema {head}) needs "
                f"{self.needs}; run `scheduler-daemon migrate`",
            )
        if self.knows(current):
            missing = [s.revision for s in self.after(current) if s.phase != "contract"]
            if missing:
                return Verdict(
                    "behind",
                    f"the database schema is at {current}, this build (schema {head}) needs "
                    f"{self.needs}; run `scheduler-daemon migrate`",
                )
            oldest = record.oldest_build if record is not None else self.oldest_build_at(current)
        elif before_squash(current):
            return Verdict(
                "behind",
                f"the database schema is at {current}, from before the squash; this build "
                f"(schema {head}) needs {self.needs}: run `scheduler-daemon migrate` with the "
                "fleet stopped"
                + ("" if current == PRESQUASH_HEAD else f", after reaching {PRESQUASH_HEAD}"),
            )
        elif record is None:
            return Verdict(
                "too_new",
                f"the database schema is at {current}, which this build (schema {head}) does "
                "not know and which records no compatible builds; upgrade this build",
            )
        else:
            oldest = record.oldest_build
        if not self.knows(oldest) or self.index(oldest) > self.index(head):
            return Verdict(
                "too_new",
                f"the database schema is at {current} and works with builds from schema "
                f"{oldest} on; this build is at schema {head}: upgrade it",
            )
        return Verdict("ok", f"the database schema is at {current}; this build ({head}) works")
