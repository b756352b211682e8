"""Runs a command (the daemon's CLI, or a PgQueuer worker) with its psycopg round trips counted.

    python -m bench.counted scheduler-daemon ARGS...   |   python -m bench.counted pgqueuer URL ...

Every statement a cursor sends (`execute`, `executemany`) and every transaction command psycopg
sends itself (BEGIN, COMMIT, ROLLBACK, SAVEPOINT) is one round trip; connecting is not counted.
At exit the counts go to BENCH_COUNTS/<pid>.json.

For bench/fleet_size.py a daemon's counts also say how many claims it sent (statements calling
`sd_claim_launch_*`) with their round-trip seconds, and how many wake-ups its waker heard; with
BENCH_COUNTS_LIVE set they are written every half second as well, so a measurement can take the
difference over a window while the daemons run.
"""

import atexit
import json
import os
import sys
import threading
import time
from typing import Any

import psycopg
from psycopg import _connection_base

COUNTS: dict[str, Any] = {"statements": 0, "commands": 0, "claims": 0, "wakeups": 0}
CLAIM_SECONDS: list[float] = []  # each claim's round trip, lock wait included


def install() -> dict[str, int]:
    """Wraps the psycopg entry points that cost a round trip; returns the live counts."""

    def wrap(cls: Any, name: str, key: str) -> None:
        original = getattr(cls, name)

        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            COUNTS[key] += 1
            if key == "statements" and args and "sd_claim_launch" in str(args[0]):
                began = time.perf_counter()
                try:
                    return original(self, *args, **kwargs)
                finally:
                    COUNTS["claims"] += 1
                    CLAIM_SECONDS.append(time.perf_counter() - began)
            return original(self, *args, **kwargs)

        setattr(cls, name, counted)

    for cls in (psycopg.Cursor, psycopg.AsyncCursor):
        wrap(cls, "execute", "statements")
        wrap(cls, "executemany", "statements")
    wrap(_connection_base.BaseConnection, "_exec_command", "commands")
    return COUNTS


def _count_wakeups() -> None:
    """Counts each wake-up the daemon's waker hears (its own LISTEN probes left out)."""
    from scheduler_daemon.services import waker

    original = waker.Waker.heard

    def heard(self: Any, payload: str) -> None:
        if payload.partition(" ")[0] != waker.PROBE:
            COUNTS["wakeups"] += 1
        original(self, payload)

    waker.Waker.heard = heard  # type: ignore[method-assign]


def _dump() -> None:
    directory = os.environ.get("BENCH_COUNTS")
    if directory:
        path = os.path.join(directory, f"{os.getpid()}.json")
        with open(path + ".tmp", "w", encoding="ascii") as f:
            json.dump({**COUNTS, "claim_seconds": CLAIM_SECONDS}, f)
        os.replace(path + ".tmp", path)  # a reader never sees half a file


def _dump_live() -> None:
    while True:
        time.sleep(0.5)
        _dump()


def main() -> None:
    install()
    atexit.register(_dump)
    program, args = sys.argv[1], sys.argv[2:]
    if os.environ.get("BENCH_COUNTS_LIVE"):
        threading.Thread(target=_dump_live, name="bench-counts", daemon=True).start()
    if program == "scheduler-daemon":
        from scheduler_daemon.cli import main as cli_main

        _count_wakeups()

        cli_main(args)
    elif program == "pgqueuer":
        from bench.pgq_worker import main as worker_main

        worker_main(args)
    else:
        raise SystemExit(f"unknown program {program}")


if __name__ == "__main__":
    main()
