"""One lifecycle for the daemon's threaded services (ADR 0032): the lease keeper, the waker and
the notification deliverer each run on a named daemon thread of their own, until a stop event is
set; the daemon starts them, watches whether they are alive, restarts the ones that degrade
(`restart`, with back-off: runtime/supervision.py) and stops them with a deadline. `Backoff` is the
one doubling wait of the daemon's retries: a waker's failed session, a lease keeper's reconnect,
the wait for the database at start, a dead side thread's restart."""

import threading
import time


class Backoff:
    """A wait that starts at `first` and doubles after each use, up to `most`; `reset` after a
    success."""

    def __init__(self, first: float, most: float) -> None:
        self.first = first
        self.most = most
        self.current = first  # the wait the next `next()` returns

    def next(self) -> float:
        """The wait to use now; the one after is twice as long (up to `most`)."""
        wait, self.current = self.current, min(self.current * 2, self.most)
        return wait

    def reset(self) -> None:
        self.current = self.first


class ThreadedService:
    """A service whose work (`_run`) runs on a named daemon thread until `stop_requested` is set.

    `start` starts the thread; `alive` is False only once a started thread ended without being
    asked to (before `start`, and after `stop`, nothing has failed); `restart` puts a new thread
    in place of a dead one (never after `stop`); `stop` sets `stop_requested`, waits for the
    thread up to `stop_timeout` seconds, then lets the service close what it holds (`_stopped`)
    within the same deadline."""

    stop_timeout = 5.0

    def __init__(self, name: str) -> None:
        self.thread_name = name
        self.stop_requested = threading.Event()
        self._thread = self._new_thread()

    def _run(self) -> None:
        """The thread's body: returns once `stop_requested` is set (or raises: the thread died)."""
        raise NotImplementedError

    def _new_thread(self) -> threading.Thread:
        return threading.Thread(target=self._run, name=self.thread_name, daemon=True)

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        """False once a started thread ended on its own (not when it was stopped)."""
        return not self.started or self._thread.is_alive() or self.stop_requested.is_set()

    def restart(self) -> None:
        """A new thread in place of a dead one; nothing while one runs, or after `stop`."""
        if self._thread.is_alive() or self.stop_requested.is_set():
            return
        self._thread = self._new_thread()
        self._thread.start()

    def stop(self) -> None:
        """Stops the thread (waiting up to `stop_timeout` seconds for it), then `_stopped`
        closes what the service holds, within the same deadline."""
        deadline = time.monotonic() + self.stop_timeout
        self.stop_requested.set()
        if self.started:
            self._thread.join(timeout=left(deadline))
        self._stopped(deadline)

    def _stopped(self, deadline: float) -> None:
        """After the thread: what the service holds besides it (a connection, worker threads)."""


def left(deadline: float) -> float:
    """Seconds from now to a `time.monotonic()` deadline, never below zero."""
    return max(0.0, deadline - time.monotonic())
