"""The shell watchdog: one process per daemon that starts shell jobs and kills them on time.

Run as `python -m scheduler_daemon.executors.watchdog --parent PID`. It reads JSON lines on stdin
(`start`, `stop`, `extend`), writes JSON lines on stdout (`started`, `exited`,
`error`), and kills a job's whole process group when the daemon asks, when the job's timeout passes,
when its trust deadline (absolute CLOCK_MONOTONIC) passes, or when the daemon is gone (EOF on stdin,
a broken stdout, or the parent-death signal). It never blocks on the daemon: stdout is
non-blocking with a queue, so a SIGSTOPped daemon cannot stall it. A `start` whose trust deadline
has already passed (the daemon froze between its claim and the start) spawns nothing: it exits at
once `stopped`, NOT_STARTED_ERROR. Standard library only, besides the pure `executors.timer` that
decides when each job is killed, the outcome vocabulary (`domain.status`) and `executors.wire`'s
texts; the wire carries its statuses as their string values.
"""

import contextlib
import ctypes
import json
import os
import selectors
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from scheduler_daemon.domain.status import OutcomeStatus
from scheduler_daemon.executors.timer import JobTimers, next_wake
from scheduler_daemon.executors.wire import NOT_STARTED_ERROR

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_EXIT_REAP_SECONDS = 2.0
# Signals a job must start with at their defaults, whatever the watchdog did with them.
_RESET_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ}


@dataclass
class _Job:
    job_id: int
    pid: int
    timers: JobTimers  # once timers.killed, SIGKILL was sent and only the exit is awaited


class Watchdog:
    """The event loop: commands in, timers, child exits, events out."""

    def __init__(self, parent: int | None) -> None:
        self.parent = parent
        self.jobs: dict[int, _Job] = {}  # by pid
        self.by_id: dict[int, _Job] = {}
        self.outbox = bytearray()
        self.inbuf = bytearray()
        self.running = True
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)
        os.set_blocking(0, False)
        os.set_blocking(1, False)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the daemon decides; ^C is for it
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGHUP, self._on_term)
        self.selector.register(0, selectors.EVENT_READ, "stdin")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.stdout_registered = False
        self.env = dict(os.environ)

    def _on_term(self, signum: int, _frame: object) -> None:
        # The parent-death signal also fires when the daemon *thread* that started us exits;
        # only a changed parent means the daemon is really gone.
        if signum == signal.SIGTERM and self.parent is not None and os.getppid() == self.parent:
            return
        self.running = False

    # -- commands -------------------------------------------------------------------------------

    def handle_line(self, line: bytes) -> None:
        command: dict[str, Any] = {}
        try:
            command = json.loads(line)
            op = command["op"]
            if op == "start":
                self.start(command)
            elif op == "stop":
                self.stop(int(command["id"]))
            elif op == "extend":
                job = self.by_id.get(int(command["id"]))
                if job is not None:
                    job.timers.extend(float(command["deadline"]))
            else:
                self.emit({"event": "error", "id": command.get("id"), "error": f"bad op {op!r}"})
        except Exception as exc:  # a bad line must never take the watchdog down
            error = f"{type(exc).__name__}: {exc}"
            self.emit({"event": "error", "id": command.get("id"), "error": error})

    def start(self, command: dict[str, Any]) -> None:
        job_id = int(command["id"])
        spool = str(command["spool"])
        env = {**self.env, **command.get("env", {})}
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, spool, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ]
        deadline = float(command["deadline"])
        if time.monotonic() >= deadline:  # the daemon froze on the way: its lease may be gone
            status, error = OutcomeStatus.STOPPED, NOT_STARTED_ERROR
            self.emit(
                {"event": "exited", "id": job_id, "status": status, "code": None, "error": error}
            )
            return
        try:
            pid = os.posix_spawn(
                "/bin/sh",
                ["sh", "-c", str(command["command"])],
                env,
                file_actions=actions,
                setsid=True,
                setsigdef=_RESET_SIGNALS,
                setsigmask=(),
            )
        except (OSError, NotImplementedError, ValueError) as exc:
            self.emit({"event": "error", "id": job_id, "error": f"cannot start: {exc}"})
            return
        timeout = command.get("timeout")
        timers = JobTimers(
            time.monotonic(),
            deadline=deadline,
            timeout=None if timeout is None else float(timeout),
        )
        job = _Job(job_id=job_id, pid=pid, timers=timers)
        self.jobs[pid] = job
        self.by_id[job_id] = job
        self.emit({"event": "started", "id": job_id, "pid": pid, "pgid": pid})

    def stop(self, job_id: int) -> None:
        job = self.by_id.get(job_id)
        # The daemon fills in its own reason; the kill follows the grace unless the job exits.
        if job is not None and job.timers.stop(time.monotonic()):
            _killpg(job.pid, signal.SIGTERM)

    # -- timers and exits -----------------------------------------------------------------------

    def fire_timers(self) -> None:
        now = time.monotonic()
        for job in self.jobs.values():
            if job.timers.fire(now) is not None:
                _killpg(job.pid, signal.SIGKILL)

    def next_timer(self) -> float | None:
        return next_wake(job.timers for job in self.jobs.values())

    def reap(self) -> None:
        """Collect every exited child; kill what a finished job left in its group first."""
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == 0:
                return
            job = self.jobs.pop(info.si_pid, None)
            if job is not None:
                # The zombie leader still holds the group id, so this cannot hit a stranger.
                _killpg(job.pid, signal.SIGKILL)
            _, status = os.waitpid(info.si_pid, 0)
            if job is not None:
                self.by_id.pop(job.job_id, None)
                self.report_exit(job, os.waitstatus_to_exitcode(status))

    def report_exit(self, job: _Job, code: int) -> None:
        if job.timers.reason is not None:
            status, error = job.timers.reason
        elif code == 0:
            status, error = OutcomeStatus.SUCCESS, ""
        elif code > 0:
            status, error = OutcomeStatus.FAILED, f"exit code {code}"
        else:
            status, error = OutcomeStatus.FAILED, f"killed by signal {_signal_name(-code)}"
        self.emit(
            {"event": "exited", "id": job.job_id, "status": status, "code": code, "error": error}
        )

    # -- I/O ------------------------------------------------------------------------------------

    def emit(self, event: dict[str, Any]) -> None:
        self.outbox += json.dumps(event, separators=(",", ":")).encode() + b"\n"
        self.flush()

    def flush(self) -> None:
        while self.outbox:
            try:
                written = os.write(1, self.outbox)
            except BlockingIOError:
                break
            except OSError:  # the daemon closed its end: it is gone
                self.outbox.clear()
                self.running = False
                break
            del self.outbox[:written]
        want = bool(self.outbox)
        if want != self.stdout_registered:
            if want:
                self.selector.register(1, selectors.EVENT_WRITE, "stdout")
            else:
                self.selector.unregister(1)
            self.stdout_registered = want

    def read_stdin(self) -> None:
        try:
            chunk = os.read(0, 65536)
        except BlockingIOError:
            return
        if not chunk:  # EOF: the daemon exited or died
            self.running = False
            return
        self.inbuf += chunk
        *lines, rest = self.inbuf.split(b"\n")
        self.inbuf = bytearray(rest)
        for line in lines:
            if line.strip():
                self.handle_line(bytes(line))

    def run(self) -> None:
        while self.running:
            timer = self.next_timer()
            timeout = None if timer is None else max(0.0, timer - time.monotonic())
            for key, _ in self.selector.select(timeout):
                if key.data == "stdin":
                    self.read_stdin()
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self.wake_r, 4096):
                            pass
                elif key.data == "stdout":
                    self.flush()
            self.reap()
            self.fire_timers()
        self.shutdown()

    def shutdown(self) -> None:
        """The daemon is gone: kill every group, reap everything, exit."""
        for job in self.jobs.values():
            _killpg(job.pid, signal.SIGKILL)
        limit = time.monotonic() + _EXIT_REAP_SECONDS
        while time.monotonic() < limit:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.01)


def _killpg(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _signal_name(signum: int) -> str:
    try:
        return f"{signal.Signals(signum).name} ({signum})"
    except ValueError:
        return str(signum)


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def main(argv: list[str]) -> None:
    parent = int(argv[argv.index("--parent") + 1]) if "--parent" in argv else None
    # Belt to the EOF braces: a catchable signal when the daemon dies, so we can kill the groups
    # first (SIGKILL would kill only us and orphan the jobs).
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    # Orphaned grandchildren of jobs come to us and are reaped here, even where PID 1 reaps nothing.
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    if parent is not None and os.getppid() != parent:
        return  # the daemon died before we could watch it
    Watchdog(parent).run()


if __name__ == "__main__":
    main(sys.argv[1:])
