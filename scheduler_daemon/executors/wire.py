"""What crosses a python worker's socket: length-prefixed `marshal` messages (`Channel`), and the
text limits the worker applies for the daemon (the output tail, one-line errors).

Both ends import this module, the worker before anything else, so it imports only `os` and
`marshal`: a worker that loaded multiprocessing, pickle, dataclasses and typing to talk to the
daemon took 83 ms of CPU to start where the interpreter alone takes 13 ms, and a fleet starts
--concurrency workers per daemon (docs/performance.md). Both ends run the same interpreter
(`sys.executable`), so marshal's format is the same on both; it carries only the plain values of
the messages (tuples, dicts, str, bytes, int, float, bool, None), never a user's object.
"""

from __future__ import annotations

import marshal
import os

TYPE_CHECKING = False  # typing alone costs a worker 17 ms to import; mypy reads this as True
if TYPE_CHECKING:
    from typing import Any

OUTPUT_TAIL_BYTES = 65536
"""At most this many bytes of the END of a job's output are kept in `Outcome.output_tail`."""

NOT_STARTED_ERROR = "not started: trust deadline passed"
"""The error of a run refused at its start because its trust deadline had passed (an `Outcome`
of status `stopped`, recorded `interrupted`): the launcher's, and each executor's at its last
step before the job begins (the watchdog's spawn, the worker's call, the http request). Here
because the worker, which imports only this module, says it too."""

_HEADER = 4  # a message's length, big-endian, then the message


def one_line(text: str) -> str:
    """`text` squeezed onto one line, as Outcome.error wants it."""
    return " ".join(text.split())


def error_line(exc: BaseException) -> str:
    """'ExcType: message' on one line."""
    message = one_line(str(exc))
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


class Channel:
    """One end of a worker's stream socket (a file descriptor this object owns). Each end has one
    reader thread and sends under its own lock, so no two threads read or write it at once. A
    read may bring more than one message: `pending()` says whether one is already here, which
    polling the descriptor would not."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""

    def fileno(self) -> int:
        return self.fd

    def send(self, message: Any) -> None:
        body = marshal.dumps(message)
        data = memoryview(len(body).to_bytes(_HEADER, "big") + body)
        while data:
            data = data[os.write(self.fd, data) :]

    def pending(self) -> bool:
        """Whether a whole message is already buffered (recv() returns it without reading)."""
        buffered = len(self._buffer)
        return buffered >= _HEADER and buffered >= _HEADER + self._size()

    def recv(self) -> Any:
        """The next message; EOFError when the other end closed."""
        while not self.pending():
            wanted = _HEADER if len(self._buffer) < _HEADER else _HEADER + self._size()
            chunk = os.read(self.fd, max(wanted - len(self._buffer), 65536))
            if not chunk:
                raise EOFError("the other end of the worker socket closed")
            self._buffer += chunk
        end = _HEADER + self._size()
        # S302: the peer is our own worker or daemon on a socketpair, never outside input
        message = marshal.loads(self._buffer[_HEADER:end])  # noqa: S302
        self._buffer = self._buffer[end:]
        return message

    def close(self) -> None:
        os.close(self.fd)

    def _size(self) -> int:
        return int.from_bytes(self._buffer[:_HEADER], "big")
