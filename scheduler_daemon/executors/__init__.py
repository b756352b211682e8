"""Executors run jobs (shell commands, HTTP calls, python callables) and report their Outcome.

No database, storage or service imports here: the daemon hands each job a JobContext and payload,
polls the Job, and renews each job's trust deadline through Job.extend(). The contract lives in
`executors.base`; import from the module that defines a name.

Nothing is imported here at run time: the shell watchdog and the python workers are started as
`python -m scheduler_daemon.executors.…`, which runs this file first, and they must stay light
(tests/unit/test_executor_imports.py). So make_executors imports the executors when called.
"""

TYPE_CHECKING = False  # not from `typing`, which alone costs a worker 17 ms to import
if TYPE_CHECKING:
    import threading
    from pathlib import Path

    from scheduler_daemon.executors.base import Executor


def make_executors(
    wake: "threading.Event",
    spool_dir: "Path | None" = None,
    *,
    concurrency: int = 4,
    python_workers: int = 0,
) -> "dict[str, Executor]":
    """One executor of each kind, by kind. `wake` is set whenever any job finishes.

    The python executor keeps up to `concurrency` idle workers (the daemon's --concurrency), so
    a full load reuses workers instead of starting a process per job; `python_workers` of them
    are started now (PythonExecutor.warm).

    Job output is spooled under `spool_dir` (created if missing), or under private temporary
    directories that each executor's close() removes.
    """
    from scheduler_daemon.executors.http import HttpExecutor
    from scheduler_daemon.executors.python import PythonExecutor
    from scheduler_daemon.executors.shell import ShellExecutor

    python = PythonExecutor(wake, spool_dir, max_idle=concurrency)
    python.warm(python_workers)
    executors: list[Executor] = [ShellExecutor(wake, spool_dir), HttpExecutor(wake), python]
    return {executor.kind: executor for executor in executors}
