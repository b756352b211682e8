"""Callables the in-process executor tests run as `tests.inprocess_jobs:<name>`: they run inside
the test process (or the daemon), so they meet the test through this module's globals."""

import asyncio
import sys
import threading
import time
from typing import Any

RELEASE = threading.Event()
"""Set by a test to let the jobs that ignore a stop return (they also give up after 30 s)."""
STARTED: dict[str, threading.Event] = {}
"""A job named `say`'s key sets its event once it printed its first line (a test's barrier)."""
SEEN: dict[str, Any] = {}


def started(key: str) -> threading.Event:
    return STARTED.setdefault(key, threading.Event())


def answer(ctx: Any) -> int:
    """Return a value: it lands in the output tail."""
    SEEN["answer"] = ctx
    return 42


async def answer_async(ctx: Any) -> str:
    """A coroutine function: awaited on the executor's event loop."""
    await asyncio.sleep(0)
    SEEN["loop_thread"] = threading.current_thread().name
    print("from the coroutine")
    return "async ok"


def boom(ctx: Any) -> None:
    print("before the failure")
    raise RuntimeError("it broke\nacross two lines")


async def boom_async(ctx: Any) -> None:
    raise KeyError("async boom")


def say(ctx: Any) -> None:
    """Print its task name, signal the test, wait for the other job to print too, print again:
    two of them interleave their prints on two threads."""
    print(f"first from {ctx.task_name}")
    print(f"to stderr from {ctx.task_name}", file=sys.stderr)
    started(ctx.task_name).set()
    other = "left" if ctx.task_name == "right" else "right"
    started(other).wait(10)
    print(f"last from {ctx.task_name}")


async def say_async(ctx: Any) -> None:
    """As `say`, on the event loop (both jobs' tasks interleave there)."""
    print(f"first from {ctx.task_name}")
    started(ctx.task_name).set()
    other = "left" if ctx.task_name == "right" else "right"
    while not started(other).is_set():
        await asyncio.sleep(0.01)
    print(f"last from {ctx.task_name}")


def patient(ctx: Any) -> str:
    """Honour the stop: wait for `ctx.cancelled`, then return."""
    print("waiting")
    ctx.cancelled.wait(30)
    return "saw the stop" if ctx.cancelled.is_set() else "never stopped"


async def patient_async(ctx: Any) -> None:
    """Honour the stop as a coroutine does: be cancelled in an await."""
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        SEEN["cancelled_error"] = True
        print("cancelled in the await")
        raise


def stubborn(ctx: Any) -> str:
    """Ignore the stop: run until the test sets RELEASE (30 s at most)."""
    print("ignoring stops")
    RELEASE.wait(30)
    return "released"


def sleeper(ctx: Any) -> str:
    """Ignore the stop, in a real daemon: sleep 60 s (the daemon's exit ends it)."""
    print("sleeping through stops", flush=True)
    time.sleep(60)
    return "woke"


def exits(ctx: Any) -> None:
    """SystemExit with a non-zero code fails the run, never the daemon."""
    raise SystemExit(3)


def sleeper_once(ctx: Any) -> str:
    """In a real daemon: the first attempt (no file at $INPROC_MARKER yet) creates it and
    sleeps 60 s whatever it is asked; a later attempt returns at once."""
    import os
    from pathlib import Path

    marker = Path(os.environ["INPROC_MARKER"])
    if marker.exists():
        return "second attempt"
    marker.touch()
    time.sleep(60)
    return "woke"
