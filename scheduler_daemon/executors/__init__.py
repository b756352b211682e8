"""Executors run jobs (shell commands, HTTP calls, python callables) and report their Outcome.

No database, storage or service imports here: the daemon hands each job a JobContext and payload,
polls the Job, and renews each job's trust deadline through Job.extend().
"""

import threading
from pathlib import Path

from scheduler_daemon.executors.base import (
    OUTPUT_TAIL_BYTES,
    STOP_GRACE_SECONDS,
    Executor,
    Job,
    JobContext,
    Outcome,
)
from scheduler_daemon.executors.http import HttpExecutor
from scheduler_daemon.executors.python import PythonExecutor
from scheduler_daemon.executors.shell import ShellExecutor

__all__ = [
    "OUTPUT_TAIL_BYTES",
    "STOP_GRACE_SECONDS",
    "Executor",
    "HttpExecutor",
    "Job",
    "JobContext",
    "Outcome",
    "PythonExecutor",
    "ShellExecutor",
    "make_executors",
]


def make_executors(wake: threading.Event, spool_dir: Path | None = None) -> dict[str, Executor]:
    """One executor of each kind, by kind. `wake` is set whenever any job finishes.

    Job output is spooled under `spool_dir` (created if missing), or under private temporary
    directories that each executor's close() removes.
    """
    executors: list[Executor] = [
        ShellExecutor(wake, spool_dir),
        HttpExecutor(wake),
        PythonExecutor(wake, spool_dir),
    ]
    return {executor.kind: executor for executor in executors}
