"""A signal must not run its work inside the main thread's Python signal handler: the handler
runs between two bytecodes of whatever the main thread is doing, and setting an event whose lock
that thread holds (inside `Event.clear()` or `wait()`) deadlocks it. The fault soak caught a
daemon that ignored SIGTERM this way, its `run` handler setting the loop's wake event.

The window is entered, not hoped for: the child process holds the event's lock while it signals
itself, so the handler runs exactly while the lock is held. The handler of 3b194d0 (the event set
in the Python handler) hangs there; SignalRelay's thread waits for the lock and then sets it."""

import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    from scheduler_daemon.runtime.signals import SignalRelay

    wake = threading.Event()
    if sys.argv[1] == "relay":
        SignalRelay(lambda _signum: wake.set())
    else:  # how `run` handled SIGTERM before: the event set in the Python handler
        signal.signal(signal.SIGTERM, lambda *_: wake.set())
    with wake._cond:  # the main thread holds the event's lock, as inside wait() or clear()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.3)  # the Python handler runs here, on this thread
    print("released", flush=True)
    print("woken" if wake.wait(5) else "not woken", flush=True)
    """
)


def _child(mode: str, timeout: float = 10) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", CHILD, mode]
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout)


def test_a_signal_while_the_main_thread_holds_the_events_lock_still_sets_it() -> None:
    done = _child("relay")
    assert (done.returncode, done.stdout.split()) == (0, ["released", "woken"]), done.stderr


def test_the_window_is_real_the_event_set_in_the_handler_deadlocks() -> None:
    with pytest.raises(subprocess.TimeoutExpired) as hung:
        _child("handler", timeout=3)
    assert "released" not in str(hung.value.stdout)  # stuck inside the with block
