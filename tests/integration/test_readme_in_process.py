"""The README's in-process example, followed as written (issue 44, item 5): its module saved in
the working directory, its `tasks add` and its `run` line run through the installed console
script (`.venv/bin/scheduler-daemon`, whose `sys.path` starts at `.venv/bin`, not at the working
directory). The README said only "importable by the daemon", and every run failed with
`ModuleNotFoundError: No module named 'mymodule'`."""

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from tests.support import query, wait_for

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "scheduler-daemon"


def _example() -> tuple[str, list[str]]:
    """The README's in-process example: its Python block and its shell lines."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("A Python function, called by the daemon itself")
    python, shell = re.findall(r"```(?:python|sh)\n(.*?)```", readme[start:], re.S)[:2]
    lines = [line.split("  #")[0].strip() for line in shell.splitlines() if line.strip()]
    return python, lines


def _argv(line: str, here: Path) -> tuple[dict[str, str], list[str]]:
    """A README shell line as (environment assignments, argv) with `$PWD` as `here` and the
    venv's console script for `.venv/bin/scheduler-daemon`."""
    words = shlex.split(line.replace("$PWD", str(here)))
    env = {}
    while "=" in words[0] and not words[0].startswith("."):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    assert words[0] == ".venv/bin/scheduler-daemon", line
    return env, [str(SCRIPT), *words[1:]]


def test_the_readmes_in_process_example_runs_as_written(database_url: str, tmp_path: Path) -> None:
    python, lines = _example()
    (tmp_path / "mymodule.py").write_text(python)
    base = {**os.environ, "SCHEDULER_DATABASE_URL": database_url}
    base.pop("PYTHONPATH", None)
    add = next(line for line in lines if " tasks add " in line)
    env, argv = _argv(add, tmp_path)
    subprocess.run(argv, env={**base, **env}, cwd=tmp_path, check=True, capture_output=True)
    subprocess.run(
        [str(SCRIPT), "tasks", "trigger", "hello-py"], env=base, cwd=tmp_path, check=True
    )
    run = next((line for line in lines if line.endswith(" run")), ".venv/bin/scheduler-daemon run")
    env, argv = _argv(run, tmp_path)
    log = tmp_path / "daemon.log"
    with log.open("wb") as out:
        daemon = subprocess.Popen(
            argv, env={**base, **env}, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        (finished,) = wait_for(
            lambda: query(
                database_url,
                "SELECT status, error FROM run WHERE finished_at IS NOT NULL ORDER BY id LIMIT 1",
            ),
            timeout=60,
            message="the example's first run to finish",
        )
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
    assert (finished["status"], finished["error"]) == ("success", None), log.read_text()[-2000:]
