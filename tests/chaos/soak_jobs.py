"""The soak's in-process jobs (`--call tests.chaos.soak_jobs:NAME --in-process`): functions the
daemons call on their threads and event loop, each reporting what it really did to a job log.

Each job takes an OS lock (`flock`, non-blocking) for its whole life on a file of its occurrence
(by idempotency key), of its task when the task is `forbid`, and of its key when it has one; the
holder writes its run and pid into the file, so a job that finds a lock taken names who holds it.
A lock is released when the job returns or when its process ends (the kernel closes the file),
so a job that dies with its daemon (exit 8, 9, a SIGKILL) holds its locks exactly as long as its
thread lived. Every job appends JSON lines to `$SOAK_INPROCESS_DIR/joblog` in one `write` with
O_APPEND (lines never interleave, and the file's order is the order they were written, across
processes, with no clock): `start` (run, occurrence, attempt, lease token, idempotency key, pid,
and the locks it found taken) and `end` (how it ended). The soak's fault driver writes `mark`
lines into the same file (a daemon frozen, thawed, dead), and tests/chaos/soak_inprocess.py
judges the whole file. What each task does (seconds, locks, whether it ignores a stop) is read
from `$SOAK_INPROCESS_DIR/tasks.json`, written by tests/chaos/soak_workload.py.
"""

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SLICE = 0.05  # how often a job that honours a stop looks at ctx.cancelled


def _root() -> Path:
    return Path(os.environ["SOAK_INPROCESS_DIR"])


def _spec(ctx: Any) -> dict[str, Any]:
    specs: dict[str, dict[str, Any]] = json.loads((_root() / "tasks.json").read_text())
    return specs[ctx.task_name]


def log(record: dict[str, Any]) -> None:
    """Appends one JSON line to the job log, in one write (O_APPEND: never interleaved)."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(_root() / "joblog", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def key_file(key: str) -> str:
    """A lock file name for an idempotency key (any characters) or a concurrency key."""
    return hashlib.sha1(key.encode()).hexdigest()[:16]


@contextlib.contextmanager
def _locks(ctx: Any, spec: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
    """Takes the job's locks for the body of the `with`; yields the ones found taken (with their
    holder), each still opened (so it is taken the moment its holder lets go: never)."""
    names = [f"occ-{key_file(ctx.idempotency_key)}", *spec["locks"]]
    me = f"{ctx.run_id} {os.getpid()}"
    fds, taken = [], []
    try:
        for name in names:
            fd = os.open(_root() / "locks" / name, os.O_RDWR | os.O_CREAT, 0o644)
            fds.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").split()
                taken.append({"lock": name, "holder": holder})
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, me.encode(), 0)
        yield taken
    finally:
        for fd in fds:
            os.close(fd)  # the lock goes with the descriptor


def _start(ctx: Any, kind: str, taken: list[dict[str, Any]]) -> None:
    log(
        {
            "e": "start",
            "kind": kind,
            "task": ctx.task_name,
            "run": ctx.run_id,
            "occ": ctx.occurrence_id,
            "attempt": ctx.attempt,
            "token": ctx.lease_token,
            "key": ctx.idempotency_key,
            "pid": os.getpid(),
            "taken": taken,
            "src": __file__,  # which build the daemon imported (the worktree's, in a run)
        }
    )


def _end(ctx: Any, how: str) -> None:
    log({"e": "end", "run": ctx.run_id, "pid": os.getpid(), "how": how})


def _first_try(ctx: Any) -> bool:
    """True for the first job of an occurrence on this machine (a marker per idempotency key)."""
    try:
        os.close(os.open(_root() / "tried" / key_file(ctx.idempotency_key), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


def work(ctx: Any) -> str:
    """A plain function that honours a stop: runs its seconds, looking at ctx.cancelled."""
    spec = _spec(ctx)
    with _locks(ctx, spec) as taken:
        _start(ctx, "sync", taken)
        deadline = time.monotonic() + spec["seconds"]
        while time.monotonic() < deadline:
            if ctx.cancelled.wait(SLICE):
                _end(ctx, "stopped")
                return "stopped"
        _end(ctx, "returned")
    return "done"


async def work_async(ctx: Any) -> str:
    """A coroutine function that honours a stop: cancelled in its await."""
    spec = _spec(ctx)
    with _locks(ctx, spec) as taken:
        _start(ctx, "async", taken)
        try:
            await asyncio.sleep(spec["seconds"])
        except asyncio.CancelledError:
            _end(ctx, "cancelled")
            raise
        _end(ctx, "returned")
    return "done"


def stubborn(ctx: Any) -> str:
    """A plain function that ignores every stop on its occurrence's first try: sleeps its
    seconds (past its timeout and the stop grace: its daemon exits 8); a later try is quick."""
    spec = _spec(ctx)
    first = _first_try(ctx)
    with _locks(ctx, spec) as taken:
        _start(ctx, "stubborn", taken)
        # A private event nobody sets, not time.sleep: under libfaketime (daemon d2) Python's
        # time.sleep (clock_nanosleep on an absolute monotonic time) fails with EINVAL.
        threading.Event().wait(spec["seconds"] if first else 0.1)
        _end(ctx, "returned" + (" (stop ignored)" if ctx.cancelled.is_set() else ""))
    return "done"


async def stubborn_async(ctx: Any) -> str:
    """A coroutine function that swallows its cancellation and runs its seconds anyway."""
    spec = _spec(ctx)
    with _locks(ctx, spec) as taken:
        _start(ctx, "stubborn_async", taken)
        deadline = time.monotonic() + spec["seconds"]
        ignored = 0
        while (left := deadline - time.monotonic()) > 0:
            try:
                await asyncio.sleep(left)
            except asyncio.CancelledError:
                ignored += 1  # and on with the sleep
        _end(ctx, f"returned (cancel ignored {ignored}x)" if ignored else "returned")
    return "done"


def _save_args(ctx: Any) -> None:
    """Records what this attempt saw (`ctx.args`, None without arguments) in a file of its own
    in `$SOAK_INPROCESS_DIR/args`, written aside and renamed: whole or absent, however the job
    ends (tests/chaos/soak_args.py judges them)."""
    folder = _root() / "args"
    record = {
        "task": ctx.task_name,
        "occ": ctx.occurrence_id,
        "run": ctx.run_id,
        "attempt": ctx.attempt,
        "args": ctx.args,
    }
    aside = folder / f".{ctx.run_uuid}"
    aside.write_text(json.dumps(record))
    os.replace(aside, folder / ctx.run_uuid)


def record_args(ctx: Any) -> str:
    """A python job (in a worker) that records the arguments it saw and fails its occurrence's
    first attempt, so the retry must see them again."""
    _save_args(ctx)
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt fails, so a retry runs")
    return "done"


def record_args_in_process(ctx: Any) -> str:
    """`record_args` in-process, within the job log's start and end (and its occurrence's lock)
    as every in-process job of the soak."""
    spec = _spec(ctx)
    with _locks(ctx, spec) as taken:
        _start(ctx, "args", taken)
        _save_args(ctx)
        _end(ctx, "raised" if ctx.attempt == 1 else "returned")
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt fails, so a retry runs")
    return "done"
