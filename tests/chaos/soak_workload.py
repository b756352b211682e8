"""The soak's workload: its tasks (what each runs, how often, with which overlap policy and key)
and the files their jobs use to report what really ran (tests/chaos/test_soak.py runs it).

Every `forbid` or `queue` job holds an OS lock (`flock -n`) on a file of its task, and every keyed
job one on a file of its key, for its whole life (the `sleep` inherits the descriptors). A job that
finds a lock taken writes a line to the overlap file: two jobs that really ran at once, whatever
the database recorded.
"""

import random
from datetime import datetime, timedelta
from pathlib import Path

JOB = """#!/bin/sh
# job OVERLAPS SECONDS EXIT [LOCK...]: holds each lock for its whole life (the sleep inherits the
# descriptors); a lock found taken is an overlap, whatever the database recorded.
overlaps=$1; secs=$2; code=$3; shift 3
fd=3
for lock in "$@"; do
  eval "exec $fd>>\\"\\$lock\\""
  flock -n "$fd" || echo "$(date +%s.%N) $lock taken by another job: task=$SCHEDULER_TASK_NAME \
occurrence=$SCHEDULER_OCCURRENCE_ID run=$SCHEDULER_RUN_ID" >> "$overlaps"
  fd=$((fd + 1))
done
sleep "$secs"
exit "$code"
"""


class Workload:
    """The tasks of the soak and the files their jobs use."""

    def __init__(self, root: Path, rng: random.Random) -> None:
        self.root, self.rng = root, rng
        self.locks = root / "locks"
        self.locks.mkdir()
        self.overlaps = root / "overlaps"
        self.overlaps.touch()
        self.job = root / "job"
        self.job.write_text(JOB)
        self.job.chmod(0o755)
        self.specs: dict[str, list[str]] = {}
        self.keys: dict[str, list[str]] = {}  # key -> its every-second catch-up tasks

    def command(self, name: str, seconds: float, code: int, *, own: bool, key: str | None) -> str:
        locks = ([f"{self.locks}/task-{name}"] if own else []) + (
            [f"{self.locks}/key-{key}"] if key else []
        )
        return " ".join([str(self.job), str(self.overlaps), f"{seconds:.2f}", str(code), *locks])

    def add(
        self,
        name: str,
        schedule: list[str],
        seconds: float,
        *,
        overlap: str = "allow",
        key: str | None = None,
        code: int = 0,
        extra: tuple[str, ...] = (),
    ) -> None:
        own = overlap in ("forbid", "queue")
        argv = [
            *schedule,
            "--overlap",
            overlap,
            *extra,
            "--command",
            self.command(name, seconds, code, own=own, key=key),
        ]
        if key:
            argv += ["--concurrency-key", key]
        self.specs[name] = argv

    def build(self, seconds: float, start: datetime) -> None:
        r = self.rng
        for i in range(8):  # every 1-3 s, some longer than their interval: overlap skips
            self.add(
                f"forbid-{i}",
                ["--every", f"{r.choice([1, 2, 3])}s"],
                r.uniform(0.1, 1.5),
                overlap="forbid",
            )
        for i in range(4):  # longer than the lease: only renewals keep them
            self.add(f"long-{i}", ["--every", "10s"], r.uniform(4, 7), overlap="forbid")
        for i in range(4):
            self.add(f"queue-{i}", ["--every", "2s"], r.uniform(0.2, 0.8), overlap="queue")
        for k in range(4):  # shared keys; the run_all pair catches up when a row is held
            key = f"k{k}"
            for j in range(2):
                name = f"keyed-{k}-{j}"
                self.keys.setdefault(key, []).append(name)
                self.add(
                    name,
                    ["--every", "2s"],
                    r.uniform(0.05, 0.2),
                    key=key,
                    extra=("--misfire", "run_all", "--misfire-grace", "60s"),
                )
            self.add(
                f"keyed-{k}-2",
                ["--every", "5s"],
                r.uniform(0.1, 0.4),
                key=key,
                overlap=r.choice(["allow", "forbid", "queue"]),
            )
        for i in range(6):  # failing, retried with a backoff; two keyed
            self.add(
                f"failing-{i}",
                ["--every", "6s"],
                0.1,
                code=1,
                key=f"k{i // 3}" if i % 3 == 0 else None,
                overlap="forbid",
                extra=("--max-attempts", "3", "--backoff", "1s"),
            )
        for i in range(4):  # killed by their timeout
            self.add(
                f"timeout-{i}",
                ["--every", "8s"],
                10,
                overlap="forbid",
                extra=("--timeout", "1s", "--max-attempts", "2"),
            )
        for i in range(12):
            self.add(
                f"cron-{i}",
                ["--cron", "* * * * *"],
                r.uniform(0.1, 1.5),
                overlap=r.choice(["allow", "forbid"]),
            )
        for i in range(30):  # one-shots due during the soak; half also triggered by hand
            due = start + timedelta(seconds=r.uniform(15, max(20, seconds - 10)))
            self.add(f"once-{i}", ["--at", due.isoformat()], r.uniform(0.1, 2), overlap="forbid")
        for i, command in enumerate(POISON):  # output PostgreSQL cannot store as printed
            self.specs[f"poison-{i}"] = ["--every", "3s", "--overlap", "allow", *command]
        for i in range(100):
            self.add(
                f"slow-{i}",
                ["--every", f"{r.randint(15, 40)}s"],
                r.uniform(0.05, 0.5),
                overlap=r.choice(["allow", "forbid", "queue"]),
            )


# Jobs whose output or error holds NUL bytes, or runs to megabytes (issue 28: one such job once
# took every replica down in turn). Each must be recorded like any other run.
POISON = [
    ["--command", r"printf 'nul\000shell'"],
    ["--command", r"printf 'nul\000stderr' >&2; exit 1"],
    ["--command", "head -c 2000000 /dev/zero; echo megabytes"],
    ["--call", "tests.jobs:nul"],
]
