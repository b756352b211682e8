"""Expand: the claims of older builds pass over `replace` occurrences (as 0022 did for in-process).

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-07

A task is refused `--overlap replace` while an instance of a build before 0031 is registered
(ADR 0022). That covers writes, not registrations after them: an older build started once a
replace task exists (a rollback, a forgotten replica) claims through `sd_claim_launch_v1` (builds
0012 to 0018), `_v2` (0019), `_v3` (0020 to 0028) or `_v4` (0029, 0030), none of which knows that
a replace firing waits for its predecessor's job to be gone. Picking one while its predecessor
still runs, such a claim would start the two side by side, or, since 0031's unique index allows
one executing occurrence per replace task, fail as a whole: that build would then claim nothing
at all, on every pass.

Each is replaced in place, with its whole definition (the text its migration wrote: 0022's for
v1 and v2, 0020's for v3, 0029's for v4, loaded from those frozen files so the text is not
copied a fifth time) and one more condition: an occurrence whose `overlap` is `replace` is not
picked. Only a build of 0031 or later, which calls `_v5`, claims one; in a fleet of older builds
alone it waits, queued. Every other occurrence is claimed as before, with the same values.
Builds before 0012 claim with a statement of their own (ADR 0010: that window stays open until
a contract step raises the oldest revision allowed to 0012). The downgrade puts back the
definitions without the condition.
"""

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None
phase = "expand"

# The line every claim's pick starts with, and the condition this step adds after it.
PICK = "        WHERE o.status = 'queued' AND o.not_before <= coalesce(p_now, clock_timestamp())\n"
SKIP_REPLACE = (
    "          -- A replace firing (0031) is not this build's: it would start it beside its\n"
    "          -- predecessor, or fail the whole claim on the one-executing index.\n"
    "          AND o.overlap <> 'replace'\n"
)


def _frozen(name: str) -> ModuleType:
    """A released migration of this directory, loaded by path (its text never changes)."""
    path = Path(__file__).with_name(name)
    spec = importlib.util.spec_from_file_location(f"sd_migration_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path.name}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _claims() -> list[str]:
    """The definitions of v1 to v4 as their migrations last wrote them, as `CREATE OR REPLACE`."""
    in_process = _frozen("0022_older_claims_pass_over_in_process.py")
    v3 = _frozen("0020_task_in_process.py").CLAIM_LAUNCH_V3
    v4 = _frozen("0029_spread.py").CLAIM_LAUNCH_V4
    texts = [in_process.CLAIM_LAUNCH_V1, in_process.CLAIM_LAUNCH_V2, v3, v4]
    return [t.replace("CREATE FUNCTION ", "CREATE OR REPLACE FUNCTION ", 1) for t in texts]


def _skipping(text: str) -> str:
    if text.count(PICK) != 1:
        raise RuntimeError("a claim's pick is not where this step expects it")
    return text.replace(PICK, PICK + SKIP_REPLACE)


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    for text in _claims():
        op.execute(_skipping(text))


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    for text in _claims():
        op.execute(text)
