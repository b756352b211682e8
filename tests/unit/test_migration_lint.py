"""Safe DDL in every step after the baseline (ADR 0002): squawk on each step's `migrate --sql`,
plus the house rules squawk does not enforce; and on the path from 0037 (migrations/from_0037.py,
issue 45), which changes databases that hold rows. The baseline itself creates empty tables."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler_daemon.domain.schema_compat import Step
from scheduler_daemon.storage import migration, presquash

STEPS = [(s, sql) for s, sql in migration.offline_steps() if s.revision > migration.BASELINE] + [
    (Step("from_0037", "contract", "the path from 0037"), presquash.path_module().sql())
]
DDL = re.compile(r"^\s*(ALTER|CREATE|DROP|UPDATE)\b", re.I | re.M)


@pytest.mark.parametrize(("step", "sql"), STEPS, ids=[s.revision for s, _ in STEPS])
def test_squawk_finds_nothing_in_the_step(step, sql: str, tmp_path: Path) -> None:
    squawk = shutil.which("squawk") or str(Path(sys.executable).parent / "squawk")
    assert Path(squawk).exists(), "squawk is missing: pip install -e '.[dev]' (squawk-cli)"
    path = tmp_path / f"{step.revision}.sql"
    path.write_text(sql)
    # The path from 0037 runs in one transaction with the fleet stopped (ADR 0027): its
    # NOT VALID and VALIDATE share it, it drops the CHECK that proved NOT NULL, and it makes
    # the indexes of `needs_build` (ADR 0029) again in it, where CONCURRENTLY cannot run. It
    # makes `occurrence` and `run` again, partitioned (issue 47): their rows copied aside, the
    # tables dropped and created as the baseline creates them (its column types included).
    excluded = [
        "--exclude",
        "constraint-missing-not-valid,ban-drop-constraint,"
        "require-concurrent-index-creation,require-concurrent-index-deletion,"
        "ban-drop-table,prefer-bigint-over-int",
    ]
    result = subprocess.run(
        [
            squawk,
            "--pg-version",
            "15",
            *(excluded if step.revision == "from_0037" else []),
            str(path),
        ],
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
        # But in the path from 0037: one transaction, the fleet stopped (ADR 0027, ADR 0029).
        assert "CONCURRENTLY" in statement or step.revision == "from_0037", statement
    for statement in re.findall(r"^ALTER TABLE .* ADD CONSTRAINT .*$", sql, flags=re.M):
        assert statement.rstrip(";").endswith("NOT VALID"), statement
    assert step.phase in ("expand", "contract")
