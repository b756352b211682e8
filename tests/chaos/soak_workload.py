"""The soak's workload: its tasks (what each runs, how often, with which overlap policy and key)
and the files their jobs use to report what really ran (tests/chaos/test_soak.py runs it).

Every `forbid` or `queue` job holds an OS lock (`flock -n`) on a file of its task, and every keyed
job one on a file of its key, for its whole life (the `sleep` inherits the descriptors). A job that
finds a lock taken writes a line to the overlap file: two jobs that really ran at once, whatever
the database recorded.

The in-process tasks (`--in-process`) call the functions of tests/chaos/soak_jobs.py on the
daemons' threads and event loop: plain and `async def` ones that honour a stop, keyed ones of
both kinds sharing one key, long ones (past the trust deadline: a freeze or an outage ends their
daemon with exit 9), and two that ignore a stop past their timeout: a plain one past the stop
grace (its daemon exits 8 and its run is taken over) and a coroutine that swallows its
cancellation and returns within the grace. They report to their own job log, judged by
tests/chaos/soak_inprocess.py.

The tasks triggered with arguments (`tasks trigger --arg/--args-json`), one per executor that runs
on the daemons' machine (a shell job, a python job in a worker, an in-process one), fail the first
attempt of each occurrence and record what each attempt saw; tests/chaos/soak_args.py triggers
them and judges the records.

The tasks with notifications (`--notify` the test's receiver) fail, time out, skip behind a
running job and expire past a start deadline; tests/chaos/soak_notifications.py judges what was
delivered.
"""

import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

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

ARGS_JOB = """#!/bin/sh
# args-job FOLDER: records what this attempt saw (SCHEDULER_ARGS, null when it is unset) in a file
# of its own, written aside and renamed (whole or absent), and fails an occurrence's first attempt
# so a retry runs.
dir=$1
printf '{"task":"%s","occ":%s,"run":%s,"attempt":%s,"args":%s}\\n' "$SCHEDULER_TASK_NAME" \\
  "$SCHEDULER_OCCURRENCE_ID" "$SCHEDULER_RUN_ID" "$SCHEDULER_ATTEMPT" "${SCHEDULER_ARGS-null}" \\
  > "$dir/.$SCHEDULER_RUN_UUID"
mv "$dir/.$SCHEDULER_RUN_UUID" "$dir/$SCHEDULER_RUN_UUID"
[ "$SCHEDULER_ATTEMPT" -gt 1 ]
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
        self.in_process: dict[str, dict[str, Any]] = {}  # what each in-process job does
        self.notify: list[str] = []  # the tasks with notifications
        for folder in ("inprocess", "inprocess/locks", "inprocess/tried", "inprocess/args"):
            (root / folder).mkdir()
        self.joblog = root / "inprocess" / "joblog"
        self.joblog.touch()
        self.args = root / "inprocess" / "args"  # what each attempt of an args task saw
        self.args_tasks: dict[str, str] = {}  # the tasks triggered with arguments -> executor

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
        own = overlap in ("forbid", "queue", "replace")
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

    def build(self, seconds: float, start: datetime, notify_url: str) -> None:
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
        self.build_in_process()
        self.build_notify(notify_url)
        self.build_firing_semantics()
        self.build_args()
        # What each in-process job does, read by tests/chaos/soak_jobs.py.
        (self.root / "inprocess" / "tasks.json").write_text(json.dumps(self.in_process))

    def build_firing_semantics(self) -> None:
        """Tasks using issue 37's firing semantics: retries after an exponential, jittered delay
        (`--backoff-max`), `--overlap replace` (its job holds its task's OS lock, as forbid's
        does), and firings started at a spread offset (`--spread`)."""
        r = self.rng
        for i in range(2):  # retried after an exponential, jittered delay (issue 37 item 2)
            self.add(
                f"doubling-{i}",
                ["--every", "6s"],
                0.1,
                code=1,
                overlap="forbid",
                extra=("--max-attempts", "4", "--backoff", "300ms", "--backoff-max", "2s"),
            )
        for i in range(2):  # the newest firing wins (issue 37 item 3): often stops a running one
            self.add(f"replace-{i}", ["--every", "3s"], r.uniform(1, 4), overlap="replace")
        for i in range(4):  # started at a spread offset (issue 37 item 1): 2 s at most of 4 s
            self.add(
                f"spread-{i}",
                ["--every", "4s"],
                r.uniform(0.1, 1.5),
                overlap="forbid",
                extra=("--spread", "2s"),
            )

    def build_args(self) -> None:
        """The tasks triggered with arguments (tests/chaos/soak_args.py): one per executor, every
        15 s on their own (those firings have none), each occurrence's first attempt failing and
        retried after 1 s."""
        retried = ("--max-attempts", "3", "--backoff", "1s")
        job = self.root / "args-job"
        job.write_text(ARGS_JOB)
        job.chmod(0o755)
        self.specs["args-shell"] = [
            *("--every", "15s", "--overlap", "allow", *retried),
            *("--command", f"{job} {self.args}"),
        ]
        self.specs["args-python"] = [
            *("--every", "15s", "--overlap", "allow", *retried),
            *("--call", "tests.chaos.soak_jobs:record_args"),
        ]
        self.add_in_process(
            "args-inproc", "record_args_in_process", "15s", 0, overlap="allow", extra=retried
        )
        self.args_tasks = {"args-shell": "shell", "args-python": "python", "args-inproc": "inproc"}

    def build_notify(self, url: str) -> None:
        """Tasks with notifications whose firings end as each event a notification reports
        (judged by tests/chaos/soak_notifications.py): failed (and interrupted, by a drain or a
        takeover), timed out, skipped behind a running job, expired past a start deadline, and
        two with a `--deadline`, one met by some of its firings only."""
        notify = ("--notify", url, "--notify-on")
        self.add(
            "notify-failing",
            ["--every", "4s"],
            0.1,
            code=1,
            # `allow`: a retry waiting behind the fleet budget skips no firing after it (with
            # `forbid` a loaded seed had 31 of 33 firings skipped and 2 failures).
            overlap="allow",
            extra=("--max-attempts", "2", "--backoff", "1s", *notify, "failure,timeout,expired"),
        )
        self.add(
            "notify-timeout",
            ["--every", "5s"],
            10,
            overlap="forbid",
            extra=("--timeout", "1s", "--deadline", "2s", *notify, "failure,timeout,deadline"),
        )
        self.add(  # longer than its interval: the firings behind a running job are skipped
            "notify-skipped",
            ["--every", "1s"],
            1.5,
            overlap="forbid",
            extra=("--deadline", "3s", *notify, "failure,timeout,skipped,expired,deadline"),
        )
        self.add(  # queued behind itself until its start deadline passes
            "notify-expired",
            ["--every", "1s"],
            1.5,
            overlap="queue",
            extra=("--start-deadline", "2s", *notify, "failure,timeout,expired"),
        )
        self.notify = [name for name in self.specs if name.startswith("notify-")]

    def add_in_process(
        self,
        name: str,
        function: str,
        every: str,
        seconds: float,
        *,
        overlap: str = "forbid",
        key: str | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        locks = ([f"task-{name}"] if overlap in ("forbid", "queue") else []) + (
            [f"key-{key}"] if key else []
        )
        self.in_process[name] = {"seconds": round(seconds, 2), "locks": locks}
        argv = ["--every", every, "--overlap", overlap, *extra]
        argv += ["--call", f"tests.chaos.soak_jobs:{function}", "--in-process"]
        self.specs[name] = argv + (["--concurrency-key", key] if key else [])

    def build_in_process(self) -> None:
        r = self.rng
        for i in range(3):  # short, forbid: both kinds
            self.add_in_process(f"ip-sync-{i}", "work", f"{r.choice([2, 3])}s", r.uniform(0.2, 1))
            self.add_in_process(
                f"ip-async-{i}", "work_async", f"{r.choice([2, 3])}s", r.uniform(0.2, 1)
            )
        for i, function in enumerate(["work", "work_async", "work", "work_async"]):
            self.add_in_process(  # one key across threads and the event loop
                f"ip-keyed-{i}", function, "2s", r.uniform(0.1, 0.4), overlap="allow", key="ip0"
            )
        for function in ("work", "work_async"):  # past the trust deadline: a freeze ends them
            self.add_in_process(f"ip-long-{function}", function, "20s", r.uniform(10, 14))
        # Ignore their timeout's stop: past the stop grace (exit 8), and within it.
        self.add_in_process(
            "ip-stubborn",
            "stubborn",
            "25s",
            8,
            # A retry 1 s after a timeout: a daemon that wrote the timeout while the thread still
            # ran would start it beside the thread (its locks show it).
            extra=("--timeout", "1s", "--max-attempts", "3", "--backoff", "1s"),
        )
        self.add_in_process(
            "ip-stubborn-async", "stubborn_async", "7s", 1.5, extra=("--timeout", "1s")
        )


# Jobs whose output or error holds NUL bytes, or runs to megabytes (issue 28: one such job once
# took every replica down in turn). Each must be recorded like any other run.
POISON = [
    ["--command", r"printf 'nul\000shell'"],
    ["--command", r"printf 'nul\000stderr' >&2; exit 1"],
    ["--command", "head -c 2000000 /dev/zero; echo megabytes"],
    ["--call", "tests.jobs:nul"],
]
