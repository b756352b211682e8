"""Runs a command (the daemon's CLI, or a PgQueuer worker) with its psycopg round trips counted.

    python -m bench.counted scheduler-daemon ARGS...   |   python -m bench.counted pgqueuer URL ...

Every statement a cursor sends (`execute`, `executemany`) and every transaction command psycopg
sends itself (BEGIN, COMMIT, ROLLBACK, SAVEPOINT) is one round trip; connecting is not counted.
At exit the counts go to BENCH_COUNTS/<pid>.json.
"""

import atexit
import json
import os
import sys
from typing import Any

import psycopg
from psycopg import _connection_base

COUNTS = {"statements": 0, "commands": 0}


def install() -> dict[str, int]:
    """Wraps the psycopg entry points that cost a round trip; returns the live counts."""

    def wrap(cls: Any, name: str, key: str) -> None:
        original = getattr(cls, name)

        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            COUNTS[key] += 1
            return original(self, *args, **kwargs)

        setattr(cls, name, counted)

    for cls in (psycopg.Cursor, psycopg.AsyncCursor):
        wrap(cls, "execute", "statements")
        wrap(cls, "executemany", "statements")
    wrap(_connection_base.BaseConnection, "_exec_command", "commands")
    return COUNTS


def _dump() -> None:
    directory = os.environ.get("BENCH_COUNTS")
    if directory:
        with open(os.path.join(directory, f"{os.getpid()}.json"), "w", encoding="ascii") as f:
            json.dump(COUNTS, f)


def main() -> None:
    install()
    atexit.register(_dump)
    program, args = sys.argv[1], sys.argv[2:]
    if program == "scheduler-daemon":
        from scheduler_daemon.cli import main as cli_main

        cli_main(args)
    elif program == "pgqueuer":
        from bench.pgq_worker import main as worker_main

        worker_main(args)
    else:
        raise SystemExit(f"unknown program {program}")


if __name__ == "__main__":
    main()
