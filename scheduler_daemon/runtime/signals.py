"""SignalRelay: hands SIGTERM and SIGINT to a thread of their own, so that what a signal does
never runs inside the main thread's signal handler.

A Python signal handler runs on the main thread between two bytecodes, wherever that thread is:
inside `threading.Event.clear()` or `wait()`, it holds the event's lock, and a handler that sets
the same event waits for that lock forever (a daemon ignored SIGTERM in the fault soak, its loop
stuck in its wake event's clear). Here the handler does nothing in Python: the interpreter's C
handler writes the signal's number to a socket (`signal.set_wakeup_fd`), and the relay thread
reads it and calls `on_signal`, which may then take any lock the main thread holds, waiting until
it is released."""

import signal
import socket
import threading
from collections.abc import Callable, Iterable

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class SignalRelay:
    """Installs itself for `signals` (main thread only) and calls `on_signal(signum)` from its
    own daemon thread, once per signal delivered, in order."""

    def __init__(self, on_signal: Callable[[int], None], signals: Iterable[int] = SIGNALS) -> None:
        self.on_signal = on_signal
        self._read, self._write = socket.socketpair()
        self._write.setblocking(False)  # the C handler must never block
        for signum in signals:
            signal.signal(signum, _ignore)  # the C handler still writes the number
        signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        threading.Thread(target=self._relay, name="signal-relay", daemon=True).start()

    def _relay(self) -> None:
        while data := self._read.recv(64):
            for signum in data:
                self.on_signal(signum)


def _ignore(_signum: int, _frame: object) -> None:
    """The Python-level handler: nothing (SignalRelay acts on the wakeup socket)."""
