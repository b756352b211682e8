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
    from collections.abc import Callable
    from pathlib import Path

    from scheduler_daemon.executors.base import Executor
    from scheduler_daemon.executors.inprocess import InProcessJob


def make_executors(
    wake: "threading.Event",
    spool_dir: "Path | None" = None,
    *,
    concurrency: int = 4,
    python_workers: int = 0,
    in_process_stop_grace: float = 30.0,
    on_stuck: "Callable[[InProcessJob], None] | None" = None,
    on_untrusted: "Callable[[InProcessJob], None] | None" = None,
) -> "dict[str, Executor]":
    """One executor of each kind, by kind. `wake` is set whenever any job finishes.

    The python executor keeps up to `concurrency` idle workers (the daemon's --concurrency), so
    a full load reuses workers instead of starting a process per job; `python_workers` of them
    are started now (PythonExecutor.warm).

    The in-process executor runs on a pool of `concurrency` threads; `on_stuck` hears of a job
    not returned `in_process_stop_grace` seconds after it was asked to stop, `on_untrusted` of
    one whose trust deadline passed while it runs (InProcessExecutor).

    Job output is spooled under `spool_dir` (created if missing), or under private temporary
    directories that each executor's close() removes.
    """
    from scheduler_daemon.executors.http import HttpExecutor
    from scheduler_daemon.executors.inprocess import InProcessExecutor
    from scheduler_daemon.executors.python import PythonExecutor
    from scheduler_daemon.executors.shell import ShellExecutor

    python = PythonExecutor(wake, spool_dir, max_idle=concurrency)
    python.warm(python_workers)
    in_process = InProcessExecutor(
        wake,
        threads=concurrency,
        stop_grace=in_process_stop_grace,
        on_stuck=on_stuck or (lambda _job: None),
        on_untrusted=on_untrusted or (lambda _job: None),
    )
    executors: list[Executor] = [
        ShellExecutor(wake, spool_dir),
        HttpExecutor(wake),
        python,
        in_process,
    ]
    return {executor.kind: executor for executor in executors}
