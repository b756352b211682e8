"""Expand: the claims of older builds pass over occurrences with arguments; an older build's pause
or resume clears a pending `--until`; `sd_end_pause_v1` runs for the daemon role only.

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-07

Three defects of 0033 and 0034, found by review:

- A trigger with arguments is refused while an instance of a build before 0034 is registered (ADR
  0024). That covers writes, not registrations after them (as 0032 says of `replace`): an older
  build started later, or claiming attempt 2 after attempt 1 failed on a new build, claimed the
  occurrence through `sd_claim_launch_v1` to `_v5` and ran the job without its arguments. Each is
  replaced in place, with its whole text as 0032 (v1 to v4) and 0031 (v5) wrote it, loaded from
  those frozen files, and one more condition: an occurrence with `args` is not picked. Only a build
  of 0034 or later (`_v6`) claims one; in a fleet of older builds alone it waits, queued.
- An older build's `tasks pause` and `tasks resume` never touch `task.paused_until`, so after an
  older CLI resumed (or resumed and paused again) a task paused `--until` an instant, the pending
  end stayed, and the reconciler later resumed a pause the operator meant to keep. The trigger
  `task_pause_clears_until` clears `paused_until` on any update that changes `paused` without
  setting `paused_until` itself, whichever build sent it; this build's statements set it.
- `sd_end_pause_v1` (SECURITY DEFINER) was executable by PUBLIC, and its pinned search path put
  `pg_temp` first, so any role could end a pause (and, with a temporary `task` table, insert an
  `operator_action` row). Its search path becomes the schema then `pg_temp`, EXECUTE is revoked
  from PUBLIC and granted to the roles that may register an instance (the daemon roles, until
  `db roles` grants it by name, as it does from this build on).

The downgrade puts back 0032's and 0031's claims, drops the trigger and restores the function's
search path and PUBLIC's EXECUTE.
"""

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None
phase = "expand"

# The line every claim's pick starts with, and the condition this step adds after it.
PICK = "        WHERE o.status = 'queued' AND o.not_before <= coalesce(p_now, clock_timestamp())\n"
SKIP_ARGS = (
    "          -- An occurrence with arguments (0034) is not this build's: it would run the\n"
    "          -- job without them.\n"
    "          AND o.args IS NULL\n"
)
END_PAUSE = "sd_end_pause_v1(bigint, timestamptz, text, text)"
TRIGGER = "task_pause_clears_until"
CLEAR_UNTIL_V1 = r"""
CREATE OR REPLACE FUNCTION sd_task_pause_clears_until_v1() RETURNS trigger
LANGUAGE plpgsql AS $function$
BEGIN
    -- A change of `paused` that does not set `paused_until` (an older build's pause or resume)
    -- ends any pending end: only `tasks pause --until` sets one.
    IF NEW.paused IS DISTINCT FROM OLD.paused
       AND NEW.paused_until IS NOT DISTINCT FROM OLD.paused_until THEN
        NEW.paused_until := NULL;
    END IF;
    RETURN NEW;
END
$function$
"""
# The roles that may register an instance: the daemon roles `db roles` granted (the owner and
# superusers too, who need no grant). Predefined roles are left out.
GRANT_TO_DAEMONS = f"""
DO $do$
DECLARE r record;
BEGIN
    FOR r IN SELECT rolname FROM pg_roles
             WHERE rolname NOT LIKE 'pg\\_%' AND has_table_privilege(oid, 'instance', 'INSERT')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION {END_PAUSE} TO %I', r.rolname);
    END LOOP;
END
$do$
"""  # noqa: S608 (constants only)


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
    """The definitions of v1 to v5 as their migrations last wrote them, as `CREATE OR REPLACE`."""
    older = _frozen("0032_older_claims_pass_over_replace.py")
    v5 = _frozen("0031_overlap_replace.py").CLAIM_LAUNCH_V5
    v5 = v5.replace("CREATE FUNCTION ", "CREATE OR REPLACE FUNCTION ", 1)
    return [older._skipping(text) for text in older._claims()] + [v5]


def _skipping(text: str) -> str:
    if text.count(PICK) != 1:
        raise RuntimeError("a claim's pick is not where this step expects it")
    return text.replace(PICK, PICK + SKIP_ARGS)


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    for text in _claims():
        op.execute(_skipping(text))
    op.execute(CLEAR_UNTIL_V1)
    op.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON task")
    op.execute(
        f"CREATE TRIGGER {TRIGGER} BEFORE UPDATE OF paused ON task "
        "FOR EACH ROW EXECUTE FUNCTION sd_task_pause_clears_until_v1()"
    )
    op.execute(
        "DO $do$ BEGIN EXECUTE format("
        f"'ALTER FUNCTION {END_PAUSE} SET search_path = %I, pg_temp', current_schema()); "
        "END $do$"
    )
    op.execute(f"REVOKE EXECUTE ON FUNCTION {END_PAUSE} FROM PUBLIC")
    op.execute(GRANT_TO_DAEMONS)


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(f"GRANT EXECUTE ON FUNCTION {END_PAUSE} TO PUBLIC")
    op.execute(f"ALTER FUNCTION {END_PAUSE} SET search_path FROM CURRENT")
    op.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON task")
    op.execute("DROP FUNCTION IF EXISTS sd_task_pause_clears_until_v1()")
    for text in _claims():
        op.execute(text)
