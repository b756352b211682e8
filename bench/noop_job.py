"""The benchmarks' no-op python job: records its own start and end (wall clock) and returns."""

import os
import time

RECORD_ENV = "SCHEDULER_BENCH_RECORD"


def noop(ctx: object) -> None:
    """Appends `run_id start end` to the file named by SCHEDULER_BENCH_RECORD (one write)."""
    start = time.time()
    path = os.environ.get(RECORD_ENV)
    if path:
        line = f"{getattr(ctx, 'run_id', 0)} {start:.6f} {time.time():.6f}\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
