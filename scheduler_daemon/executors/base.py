"""The executor contract: what a job is given (`JobContext`), what it reports (`Outcome`), and the
`Job`/`Executor` protocols the daemon codes against, with the few helpers every executor shares.

How each executor runs, stops and reports is explained in docs/explanation/executors.md.
"""

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from scheduler_daemon.domain.status import OutcomeStatus
from scheduler_daemon.executors import timer
from scheduler_daemon.executors.wire import OUTPUT_TAIL_BYTES

STOP_GRACE_SECONDS = timer.STOP_GRACE_SECONDS
"""After stop(): SIGTERM (or the cancelled event), then SIGKILL once this much time has passed.
Defined with the job timers, which apply it."""

# Never passed on to jobs: whoever defines a task must not get the daemon's database role from
# its environment (the daemon itself still needs them to connect).
JOB_ENV_SECRETS = ("SCHEDULER_DATABASE_URL", "PGPASSWORD", "PGPASSFILE", "PGSERVICEFILE")


def job_environment() -> dict[str, str]:
    """The daemon's environment without the database credentials, for the processes that run
    jobs (the watchdog and the python workers) and so for every job."""
    return {k: v for k, v in os.environ.items() if k not in JOB_ENV_SECRETS}


@dataclass(frozen=True)
class JobContext:
    """Who a job runs for; the same fields reach the job (environment, HTTP body or ctx object)."""

    task_id: int
    task_name: str
    occurrence_id: int
    run_id: int
    scheduled_for: datetime  # aware UTC
    attempt: int
    lease_token: int
    idempotency_key: str  # stable across attempts of one occurrence, never another firing's
    timeout: float | None  # seconds; None = no timeout
    deadline: float  # absolute time.monotonic(): kill the job when it passes without extend()
    run_uuid: str  # this run's, unique even where run ids repeat (a failover that lost commits)
    traceparent: str | None = None  # the run span's W3C trace context (--otel), else None
    args: dict[str, Any] | None = None  # the manual trigger's arguments (a JSON object), else None

    def identifiers(self) -> dict[str, Any]:
        """The identifying fields as JSON-ready values (the HTTP body, the python ctx)."""
        return {
            "task_id": self.task_id,
            "task_name": self.task_name,
            "occurrence_id": self.occurrence_id,
            "run_id": self.run_id,
            "scheduled_for": self.scheduled_for.isoformat(),
            "attempt": self.attempt,
            "lease_token": self.lease_token,
            "idempotency_key": self.idempotency_key,
            "run_uuid": self.run_uuid,
            "args": self.args,
        }

    def environment(self) -> dict[str, str]:
        """The SCHEDULER_* variables a shell job finds in its environment, and TRACEPARENT when
        the run has a span."""
        env = {
            "SCHEDULER_TASK_NAME": self.task_name,
            "SCHEDULER_TASK_ID": str(self.task_id),
            "SCHEDULER_OCCURRENCE_ID": str(self.occurrence_id),
            "SCHEDULER_RUN_ID": str(self.run_id),
            "SCHEDULER_SCHEDULED_FOR": self.scheduled_for.isoformat(),
            "SCHEDULER_ATTEMPT": str(self.attempt),
            "SCHEDULER_LEASE_TOKEN": str(self.lease_token),
            "SCHEDULER_IDEMPOTENCY_KEY": self.idempotency_key,
            "SCHEDULER_RUN_UUID": self.run_uuid,
        }
        if self.traceparent:
            env["TRACEPARENT"] = self.traceparent
        if self.args is not None:
            # UTF-8 as it was measured (argument.checked_args): escaped, a 64 KiB object of
            # non-ASCII text would pass Linux's 128 KiB bound on one environment string.
            env["SCHEDULER_ARGS"] = json.dumps(self.args, separators=(",", ":"), ensure_ascii=False)
        return env


@dataclass(frozen=True)
class Outcome:
    """How a run ended. `stopped` means killed on request or because the trust deadline passed."""

    status: OutcomeStatus
    exit_code: int | None = None
    http_status: int | None = None
    output_tail: str = ""  # at most OUTPUT_TAIL_BYTES of the end of the output
    error: str | None = None  # one line


class Job(Protocol):
    """One started run. Every method is safe to call from any thread, any number of times."""

    run_id: int

    def poll(self) -> Outcome | None:
        """None while running; the same Outcome on every call once finished."""
        ...

    def stop(self, reason: str) -> None:
        """Stop now; once the job is gone poll() gives a `stopped` Outcome, error=reason."""
        ...

    def extend(self, deadline: float) -> None:
        """Move the trust deadline (an absolute time.monotonic() value)."""
        ...

    def live_output(self) -> str | None:
        """The end of the output so far (at most OUTPUT_TAIL_BYTES, as the outcome will hold
        it), for a follower; None when this kind of job has none before it ends. Never raises."""
        ...


class JobOwner(Protocol):
    """An executor that stops and extends its jobs itself (under its own lock)."""

    def stop_job(self, job: Any, reason: str) -> None: ...

    def extend_job(self, job: Any, deadline: float) -> None: ...


class OwnedJob:
    """The `Job` methods of a job its executor stops and extends (the python and in-process
    jobs): `outcome` is set once it finished; `running_output` is its tail until then."""

    executor: JobOwner
    outcome: Outcome | None

    def poll(self) -> Outcome | None:
        return self.outcome

    def stop(self, reason: str) -> None:
        self.executor.stop_job(self, reason)

    def extend(self, deadline: float) -> None:
        self.executor.extend_job(self, deadline)

    def live_output(self) -> str | None:
        outcome = self.outcome
        return outcome.output_tail if outcome is not None else self.running_output()

    def running_output(self) -> str | None:
        raise NotImplementedError


class Executor(Protocol):
    """Starts jobs of one kind; owns whatever processes and threads they need."""

    kind: str

    def start(self, ctx: JobContext, payload: Mapping[str, Any]) -> Job:
        """Never raises because of the job: one that cannot start polls as failed."""
        ...

    def close(self) -> None:
        """Stop every job and reap every process."""
        ...


class FinishedJob:
    """A job that is over before it began, e.g. a payload without a command."""

    def __init__(self, run_id: int, outcome: Outcome) -> None:
        self.run_id = run_id
        self._outcome = outcome

    @classmethod
    def failed(cls, run_id: int, error: str) -> "FinishedJob":
        """A job that failed before it began, with `error` as its reason."""
        return cls(run_id, Outcome(OutcomeStatus.FAILED, error=error))

    def poll(self) -> Outcome | None:
        return self._outcome

    def stop(self, reason: str) -> None:
        """Nothing to stop."""

    def extend(self, deadline: float) -> None:
        """Nothing to extend."""

    def live_output(self) -> str | None:
        return self._outcome.output_tail


def decode_tail(data: bytes) -> str:
    """The last OUTPUT_TAIL_BYTES of `data`, decoded leniently."""
    return data[-OUTPUT_TAIL_BYTES:].decode("utf-8", errors="replace")


def take_spool_tail(path: Path) -> str:
    """Read the end of a spool file and delete it; a missing file is empty output."""
    try:
        with path.open("rb") as spool:
            data = _spool_end(spool)
    except FileNotFoundError:
        return ""
    finally:
        path.unlink(missing_ok=True)
    return decode_tail(data)


def peek_spool_tail(path: Path) -> str | None:
    """The end of a spool file as `take_spool_tail` will read it, leaving the file; None when it
    cannot be read (not there yet, or gone)."""
    try:
        with path.open("rb") as spool:
            return decode_tail(_spool_end(spool))
    except OSError:
        return None


def _spool_end(spool: Any) -> bytes:
    size = spool.seek(0, os.SEEK_END)
    spool.seek(max(0, size - OUTPUT_TAIL_BYTES))
    data: bytes = spool.read(OUTPUT_TAIL_BYTES)
    return data


class SpoolDir:
    """Where job output is spooled: the given directory, or a private temporary one that close()
    removes."""

    def __init__(self, directory: Path | None, kind: str) -> None:
        self._owned = directory is None
        if directory is None:
            self.path = Path(tempfile.mkdtemp(prefix=f"scheduler-daemon-{kind}-"))
        else:
            directory.mkdir(parents=True, exist_ok=True)
            self.path = directory

    def file(self, name: str) -> Path:
        return self.path / name

    def close(self) -> None:
        if self._owned:
            shutil.rmtree(self.path, ignore_errors=True)
