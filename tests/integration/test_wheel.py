"""The wheel: a non-editable install in a fresh virtualenv carries sql/ and migrations/."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the project's wheel installed; returns its bin/ directory."""
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "-w",
            str(work / "dist"),
            str(ROOT),
        ],
        check=True,
    )
    wheel = next((work / "dist").glob("scheduler_daemon-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "scheduler_daemon/sql/task.sql" in names
    assert "scheduler_daemon/sql/functions/claim_launch.sql" in names  # migrate applies them
    assert "scheduler_daemon/migrations/versions/0038_baseline.py" in names
    assert "scheduler_daemon/migrations/from_0037.py" in names  # the path from 0037, issue 45
    subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
    subprocess.run(
        [str(work / "venv" / "bin" / "pip"), "install", "--quiet", str(wheel)], check=True
    )
    return work / "venv" / "bin"


def test_the_installed_wheel_migrates_and_manages_tasks(
    installed: Path, empty_database_url: str
) -> None:
    env = {**os.environ, "SCHEDULER_DATABASE_URL": empty_database_url}
    exe = str(installed / "scheduler-daemon")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [exe, *args],
            env=env,
            cwd=installed,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )

    migrated = run("migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "-- from 0037 (pre-release databases" in run("migrate", "--sql").stdout
    assert run("migrate", "--check").returncode == 0
    added = run("tasks", "add", "w", "--every", "5m", "--command", "true", "--json")
    assert added.returncode == 0, added.stderr
    listed = json.loads(run("tasks", "list", "--json").stdout)
    assert [t["name"] for t in listed] == ["w"]
    refused = run("tasks", "add", "bad", "--cron", "nope", "--command", "true")
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: invalid cron expression")
