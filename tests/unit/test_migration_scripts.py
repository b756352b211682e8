"""This build's chain of revisions is read from the scripts' text (migration.build), so that a
daemon never imports alembic and SQLAlchemy: it must say exactly what alembic's own walk of the
scripts says, and refuse a script without a phase after the baseline."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory

from scheduler_daemon.storage import migration
from scheduler_daemon.storage.resource import resource_dir


def test_the_chain_read_from_the_text_is_alembics_walk_of_the_scripts() -> None:
    config = Config()
    config.set_main_option("script_location", str(resource_dir("migrations")))
    walked = list(reversed(list(ScriptDirectory.from_config(config).walk_revisions())))

    steps = migration.build().steps

    assert [s.revision for s in steps] == [script.revision for script in walked]
    assert [s.description for s in steps] == [
        (script.module.__doc__ or "").strip().splitlines()[0] for script in walked
    ]
    assert [s.phase for s in steps] == [
        "baseline" if script.revision <= migration.BASELINE else script.module.phase
        for script in walked
    ]


def test_a_script_after_the_baseline_without_a_phase_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(resource_dir("migrations"), tmp_path / "migrations")
    head = migration.build().head
    (tmp_path / "migrations" / "versions" / "9999_no_phase.py").write_text(
        f'"""A step that forgot its phase."""\n\nrevision = "9999"\ndown_revision = "{head}"\n'
    )
    monkeypatch.setattr(migration, "resource_dir", lambda name: tmp_path / name)
    migration.build.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="migration 9999 declares no phase"):
            migration.build()
    finally:
        monkeypatch.undo()
        migration.build.cache_clear()


def test_a_daemon_process_reads_its_revisions_without_alembic_or_sqlalchemy() -> None:
    probe = (
        "import sys\n"
        "from scheduler_daemon.storage import migration\n"
        "import scheduler_daemon.runtime.daemon\n"
        "migration.head_revision()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('alembic', 'sqlalchemy')))\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert found.stdout.strip() == "[]"


def test_new_installs_run_one_baseline_and_the_path_from_0037_is_no_revision() -> None:
    """Issue 45 squashed 0001-0037: one baseline step until the first release, and the path
    from 0037 lives beside versions/, where alembic never walks it (a second root there would
    make alembic refuse the chain)."""
    steps = migration.build().steps
    assert [(s.revision, s.phase) for s in steps[:1]] == [(migration.BASELINE, "baseline")]
    assert all(s.phase != "baseline" for s in steps[1:])
    root = resource_dir("migrations")
    assert (root / "from_0037.py").is_file()
    assert [p.name for p in (root / "versions").glob("*.py") if p.name[:4] <= "0037"] == []
