"""Output capture for in-process jobs: sys.stdout and sys.stderr become proxies that send what is
written to the bounded tail of the job whose thread or asyncio task writes it (a context
variable set for it), and everything else to the real stream, so a job's prints never reach the
daemon's JSON log stream and the daemon's log lines never reach a job's output.

What is captured is what goes through the `sys.stdout`/`sys.stderr` objects as text (`print`,
`traceback`, a `logging.StreamHandler` made while the proxies are installed), from the job's own
thread or task and the asyncio tasks it creates (they copy its context). A thread the job starts
has a context of its own and writes to the real stream unless it runs in a copy of the job's
(`contextvars.copy_context().run`); writes to file descriptor 1 or 2 (`os.write`, a
subprocess) bypass the proxies. docs/explanation/executors.md#in-process says the same.
"""

import contextvars
import sys
import threading
from typing import Any, TextIO

from scheduler_daemon.executors.wire import OUTPUT_TAIL_BYTES

_INSTALL_LOCK = threading.Lock()


class Tail:
    """The last OUTPUT_TAIL_BYTES characters written (so at least that many bytes once encoded,
    each character one byte or more): `text()` is the output tail, bounded in memory however
    much a job prints."""

    def __init__(self, limit: int = OUTPUT_TAIL_BYTES) -> None:
        self.limit = limit
        self._parts: list[str] = []
        self._size = 0
        self._lock = threading.Lock()  # a job's tasks and copied contexts may write at once

    def write(self, text: str) -> int:
        with self._lock:
            self._parts.append(text)
            self._size += len(text)
            if self._size > 2 * self.limit:  # compact now and then, not on every write
                joined = "".join(self._parts)[-self.limit :]
                self._parts, self._size = [joined], len(joined)
        return len(text)

    def text(self) -> str:
        with self._lock:
            return "".join(self._parts)[-self.limit :]


CURRENT: contextvars.ContextVar[Tail | None] = contextvars.ContextVar(
    "scheduler_daemon_job_output", default=None
)
"""The tail of the job running in this thread or task; None outside jobs."""


class _Proxy:
    """Stands in for sys.stdout or sys.stderr: text goes to the current job's tail, else to
    the real stream; everything else (fileno, buffer, encoding, isatty) is the real stream's."""

    def __init__(self, real: TextIO) -> None:
        self.real = real

    def write(self, text: str) -> int:
        tail = CURRENT.get()
        if tail is None:
            return self.real.write(text)
        return tail.write(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if CURRENT.get() is None:
            self.real.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def install() -> None:
    """Puts the proxies in place of sys.stdout and sys.stderr, once per process; later
    replacements (a test's capture) are wrapped again."""
    with _INSTALL_LOCK:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if not isinstance(stream, _Proxy):
                setattr(sys, name, _Proxy(stream))


def uninstall() -> None:
    """Puts the real streams back, where the proxies are still the ones in place."""
    with _INSTALL_LOCK:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if isinstance(stream, _Proxy):
                setattr(sys, name, stream.real)
