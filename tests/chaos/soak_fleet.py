"""The soak's daemons and their supervisor: real `scheduler-daemon run` processes, restarted under
a new name after each kill, and restarted by a supervisor thread when they exit as a supervisor
must expect (exit 8: an in-process job ignored a stop past the grace; exit 9: an in-process job
still ran at its trust deadline), as systemd's `Restart=on-failure` does for the unit in
deploy/systemd/. Any other exit the fault driver did not cause is recorded as unexpected (the
soak fails on it; the daemon is restarted too, so the soak goes on). Every exit, freeze and
thaw is also marked in the in-process job log, in order with what the jobs wrote there.
"""

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

from scheduler_daemon.runtime.supervision import EXIT_IN_PROCESS_STUCK, EXIT_IN_PROCESS_UNTRUSTED
from tests.support import DaemonProcess, free_port, query, wait_for

DAEMONS = 3
LIBFAKETIME = next(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"), None)
SKEW = "+20s"  # daemon d2's host clock; the database clock is the only one that coordinates
SUPERVISED = (EXIT_IN_PROCESS_STUCK, EXIT_IN_PROCESS_UNTRUSTED)  # restarted, counted
RESTART_AFTER = 1.0  # the unit's RestartSec is 5 s; shorter keeps the soak's fleet busy
STOP_GRACE = "1500ms"  # --in-process-stop-grace: exit 8 comes within the soak's time


class Fleet:
    """The daemons (one log file per process) and the supervisor that restarts them."""

    def __init__(self, url: str, root: Path, inprocess: Path) -> None:
        self.url, self.root, self.inprocess = url, root, inprocess
        self.joblog = inprocess / "joblog"
        self.generation = Counter[int]()
        self.procs: dict[int, DaemonProcess] = {}
        self.ids: dict[int, str] = {}
        self.all: list[DaemonProcess] = []
        self.ports = {i: free_port() for i in range(DAEMONS)}  # each daemon's endpoint
        self.lock = threading.RLock()  # procs, ids and ended: the driver's and the supervisor's
        self.ended: set[int] = set()  # pids whose end the driver caused or the supervisor saw
        self.instances: dict[int, str] = {}  # pid -> instance id, once registered
        self.exits: list[dict[str, Any]] = []  # supervised exits: name, instance, code, when
        self.unexpected: list[str] = []
        self._halt = threading.Event()
        self._supervisor: threading.Thread | None = None

    def env(self, i: int) -> dict[str, str]:
        base = {
            "PYTHONFAULTHANDLER": "1",  # SIGABRT writes every thread's stack to the log
            "SOAK_INPROCESS_DIR": str(self.inprocess),  # tests/chaos/soak_jobs.py
            "no_proxy": "*",  # notifications go to the test's receiver on loopback, never
            "NO_PROXY": "*",  # through a proxy
        }
        if i != 2 or LIBFAKETIME is None:
            return base
        return {
            **base,
            "LD_PRELOAD": str(LIBFAKETIME),
            "FAKETIME": SKEW,
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    def mark(self, what: str, proc: DaemonProcess, code: int | None = None) -> None:
        """A line in the in-process job log, in order with the jobs' own lines."""
        line = json.dumps(
            {"e": "mark", "what": what, "pid": proc.pid, "name": proc.name, "code": code}
        )
        fd = os.open(self.joblog, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    # -- starting and ending, by the driver -------------------------------------------------------

    def start(self, i: int) -> None:
        """A new generation of daemon `i`, unless one is alive (the driver and the supervisor
        may both come to restart it: the first does)."""
        with self.lock:
            if i in self.procs and self.procs[i].proc.poll() is None:
                return
            self.generation[i] += 1
            name = f"d{i}g{self.generation[i]}"
            port = str(self.ports[i])
            proc = DaemonProcess(
                self.url,
                self.root,
                name,
                "--concurrency",
                "8",
                "--http-port",
                port,
                "--in-process-stop-grace",
                STOP_GRACE,
                env=self.env(i),
            )
            self.procs[i] = proc
            self.all.append(proc)
        # Through an outage (a restart, the switchover's gap) too. One killed or exited before it
        # registered is left to whoever ended it, or to the supervisor's next look.
        found = wait_for(
            lambda: self._registered(proc) or proc.proc.poll() is not None,
            timeout=60,
            interval=0.1,
            message=f"{proc.name} to register",
        )
        if not isinstance(found, list):
            return
        instance = found[0]["id"]
        with self.lock:
            self.instances[proc.pid] = instance
            if self.procs[i] is proc:
                self.ids[i] = instance

    def up(self, i: int) -> DaemonProcess | None:
        """Daemon `i`'s process if it runs and has registered, else None."""
        with self.lock:
            proc = self.procs[i]
            alive = proc.proc.poll() is None and self.instances.get(proc.pid) is not None
        return proc if alive else None

    def _registered(self, proc: DaemonProcess) -> list[dict[str, Any]]:
        """Its instance row (its id is its name plus a per-start suffix); none while the
        database cannot answer."""
        try:
            return query(self.url, "SELECT id FROM instance WHERE id LIKE %s", (f"{proc.name}-%",))
        except psycopg.Error:
            return []

    def kill(self, i: int) -> None:
        """SIGKILL; a daemon that had already exited on its own is left to the supervisor."""
        with self.lock:
            proc = self.procs[i]
            if proc.pid in self.ended:
                return
            if proc.proc.poll() is not None:
                self._reap(proc)
                return
            self.ended.add(proc.pid)
            proc.kill()
            self.mark("dead", proc, proc.proc.returncode)

    def stop(self, i: int, *, at: str) -> int:
        """SIGTERM and the exit code: 0, or a supervised one (counted, `at` says when); a daemon
        still running 30 s later is aborted so that its log ends with every thread's stack (one
        hung once, logging nothing after the signal)."""
        with self.lock:
            proc = self.procs[i]
            seen = proc.pid in self.ended  # its exit already counted (or caused by the driver)
            self.ended.add(proc.pid)
        try:
            code = proc.stop()
        except subprocess.TimeoutExpired:
            proc.signal(signal.SIGABRT)
            proc.proc.wait(10)
            raise AssertionError(
                f"{proc.name} ignored SIGTERM for 30 s:\n{proc.log()[-8000:]}"
            ) from None
        if not seen:
            self.mark("dead", proc, code)
            if code in SUPERVISED:
                self._count(proc, code, at)
        return code

    def freeze(self, i: int, seconds: float) -> None:
        """SIGSTOP for `seconds`, then SIGCONT, each marked in the job log before the signal."""
        with self.lock:
            proc = self.procs[i]
        self.mark("frozen", proc)
        proc.signal(signal.SIGSTOP)
        time.sleep(seconds)
        self.mark("thawed", proc)
        proc.signal(signal.SIGCONT)

    # -- the supervisor ---------------------------------------------------------------------------

    def supervise(self) -> None:
        self._supervisor = threading.Thread(target=self._watch, name="soak-supervisor", daemon=True)
        self._supervisor.start()

    def halt(self) -> None:
        """Stops the supervisor (before the soak stops the daemons itself)."""
        self._halt.set()
        if self._supervisor is not None:
            self._supervisor.join(90)

    def _watch(self) -> None:
        restart_at: dict[int, float] = {}
        while not self._halt.wait(0.1):
            with self.lock:
                for i, proc in list(self.procs.items()):
                    if proc.pid not in self.ended and proc.proc.poll() is not None:
                        self._reap(proc)
                        restart_at[i] = time.monotonic() + RESTART_AFTER
            for i, at in sorted(restart_at.items()):
                if time.monotonic() >= at and not self._halt.is_set():
                    del restart_at[i]
                    try:
                        self.start(i)  # nothing, if the driver restarted it meanwhile
                    except Exception as exc:  # it never registered: the soak fails, goes on
                        self.unexpected.append(f"restart of daemon {i}: {exc}")

    def _reap(self, proc: DaemonProcess) -> None:
        """An exit the driver did not cause (under the lock): counted, or recorded unexpected."""
        code = proc.proc.returncode
        self.ended.add(proc.pid)
        self.mark("dead", proc, code)
        if code in SUPERVISED:
            self._count(proc, code, "on its own")
        else:
            self.unexpected.append(f"{proc.name} exited {code}:\n{proc.log()[-3000:]}")

    def _count(self, proc: DaemonProcess, code: int, at: str) -> None:
        instance = self.instances.get(proc.pid)
        self.exits.append({"name": proc.name, "instance": instance, "code": code, "at": at})

    def exit_codes(self) -> dict[int, int]:
        return dict(Counter(e["code"] for e in self.exits))

    def exited(self) -> set[str]:
        """The instance ids of daemons that ended with a supervised exit."""
        return {e["instance"] for e in self.exits if e["instance"]}

    def logs(self) -> list[dict[str, Any]]:
        events = []
        for proc in self.all:
            for line in proc.log().splitlines():
                if line.startswith("{"):
                    try:
                        events.append(json.loads(line))
                    except json.JSONDecodeError:
                        continue  # a line cut by a SIGKILL
        return events
