"""The job processes stay light: the shell watchdog and the python worker import only what they use.

Both are started as `python -m scheduler_daemon.executors.<module>`, which first imports the
`scheduler_daemon` and `scheduler_daemon.executors` packages. Each test imports the module in a
fresh interpreter and reads what the import added to sys.modules. It would catch a package
`__init__` that imports the executors again (as it did until the re-exports were removed: every
watchdog and worker then loaded the http and python executors, urllib and multiprocessing).
"""

import json
import subprocess
import sys

import pytest

_PROBE = """
import json, sys
before = set(sys.modules)
import {module}
print(json.dumps(sorted(set(sys.modules) - before)))
"""

# Daemon-side modules a job process must never load (stdlib ones the executors use, too).
_HEAVY = {"urllib.request", "http.client", "logging", "sqlite3", "asyncio"}


def _imported_by(module: str) -> set[str]:
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE.format(module=module)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return set(json.loads(probe.stdout))


# The watchdog reports the outcome vocabulary's members (an enum module, about 1.5 ms of its one
# start per daemon); the worker sends plain strings, which its executor converts on arrival.
_VOCABULARY = {"scheduler_daemon.domain", "scheduler_daemon.domain.status"}


@pytest.mark.parametrize(
    ("module", "ours", "domain"),
    [
        # wire: the one text of a refused start (issue 31), shared with the worker; os and marshal.
        ("scheduler_daemon.executors.watchdog", {"watchdog", "timer", "wire"}, _VOCABULARY),
        ("scheduler_daemon.executors.python_worker", {"python_worker", "wire"}, set()),
    ],
)
def test_a_job_process_imports_only_the_standard_library_and_its_own_modules(
    module: str, ours: set[str], domain: set[str]
) -> None:
    imported = _imported_by(module)
    packages = {"scheduler_daemon", "scheduler_daemon.version", "scheduler_daemon.executors"}
    modules = {f"scheduler_daemon.executors.{name}" for name in ours} | domain

    assert {m for m in imported if m.split(".")[0] == "scheduler_daemon"} == packages | modules
    # (multiprocessing registers __main__ again as __mp_main__)
    others = {m.split(".")[0] for m in imported} - {"scheduler_daemon", "__mp_main__"}
    assert others - sys.stdlib_module_names == set()  # no structlog, psycopg, click, croniter, …
    assert imported & _HEAVY == set()


def test_a_python_worker_starts_without_the_heavy_standard_modules() -> None:
    # Every daemon starts up to --concurrency workers: with multiprocessing (for its Connection),
    # pickle, dataclasses (for the context) and typing a worker took 83 ms of CPU to start,
    # about 30 without them (docs/performance.md). traceback is imported when a job fails.
    imported = _imported_by("scheduler_daemon.executors.python_worker")

    heavy = {"multiprocessing", "pickle", "dataclasses", "typing", "traceback", "socket", "inspect"}
    assert imported & heavy == set()


def test_the_watchdog_starts_no_threads_or_subprocess_machinery() -> None:
    imported = _imported_by("scheduler_daemon.executors.watchdog")

    assert imported & {"threading", "subprocess", "multiprocessing", "socket"} == set()
