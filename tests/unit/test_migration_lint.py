"""Safe DDL in every step after the baseline (ADR 0002): squawk on each step's `migrate --sql`,
plus the house rules squawk does not enforce. Revisions up to BASELINE are released and frozen."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler_daemon.storage import migration

STEPS = [(s, sql) for s, sql in migration.offline_steps() if s.revision > migration.BASELINE]
DDL = re.compile(r"^\s*(ALTER|CREATE|DROP|UPDATE)\b", re.I | re.M)


def test_there_are_steps_after_the_baseline_to_lint() -> None:
    if not STEPS:
        pytest.skip(f"no revision after the baseline {migration.BASELINE} yet: nothing to lint")


@pytest.mark.parametrize(("step", "sql"), STEPS, ids=[s.revision for s, _ in STEPS])
def test_squawk_finds_nothing_in_the_step(step, sql: str, tmp_path: Path) -> None:
    squawk = shutil.which("squawk") or str(Path(sys.executable).parent / "squawk")
    assert Path(squawk).exists(), "squawk is missing: pip install -e '.[dev]' (squawk-cli)"
    path = tmp_path / f"{step.revision}.sql"
    path.write_text(sql)
    result = subprocess.run(
        [squawk, "--pg-version", "15", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("step", "sql"), STEPS, ids=[s.revision for s, _ in STEPS])
def test_every_statement_waits_for_locks_at_most_lock_timeout(step, sql: str) -> None:
    # Each transaction (BEGIN ... COMMIT) and each autocommit run sets lock_timeout before DDL.
    for block in re.split(r"^(?:BEGIN|COMMIT);$", sql, flags=re.M):
        first = DDL.search(block)
        if first is None or "version_num" in block:
            continue
        assert "lock_timeout" in block[: first.start()], f"{step.revision}: {block.strip()[:200]}"


@pytest.mark.parametrize(("step", "sql"), STEPS, ids=[s.revision for s, _ in STEPS])
def test_indexes_are_built_concurrently_and_constraints_added_not_valid(step, sql: str) -> None:
    for statement in re.findall(r"^CREATE (?:UNIQUE )?INDEX.*$", sql, flags=re.M):
        assert "CONCURRENTLY" in statement, statement
    for statement in re.findall(r"^ALTER TABLE .* ADD CONSTRAINT .*$", sql, flags=re.M):
        assert statement.rstrip(";").endswith("NOT VALID"), statement
    assert step.phase in ("expand", "contract")
