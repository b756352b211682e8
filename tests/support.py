"""Helpers the tests share: real daemon processes, polling with a deadline, row snapshots."""

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple, NoReturn, TypeVar

import psycopg
import pytest
from psycopg.rows import dict_row

from scheduler_daemon.domain.held import HeldRun, HeldRuns
from scheduler_daemon.runtime.root import build_services
from scheduler_daemon.settings import DaemonSettings

T = TypeVar("T")
# Timings that make a test daemon react in about a second instead of tens of seconds.
FAST = (
    "--poll-interval",
    "200ms",
    "--lease-ttl",
    "3s",
    "--lease-grace",
    "1s",
    "--reconcile-interval",
    "1s",
    "--drain-timeout",
    "2s",
    "--stop-timeout",
    "10s",
)
# While the database is down, each failed step of a daemon's loop waits out the pool's 5 s
# connection timeout (storage.database), and the reconcile step takes its turn between passes:
# three failed passes take about 30 s, which the default 30 s wait missed on a loaded CI machine.
OUTAGE_STEPS_TIMEOUT = 90.0
# A task definition every CLI test can add: due every minute, a command that succeeds.
EVERY_MINUTE = ("--cron", "* * * * *", "--command", "true")


def wait_for(
    predicate: Callable[[], T],
    *,
    timeout: float = 30.0,
    interval: float = 0.05,
    message: str = "condition",
) -> T:
    """Polls `predicate` until it returns something truthy; fails the test at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def unavailable(reason: str) -> NoReturn:
    """Skip saying why, except under CI=true, where a missing prerequisite fails the test:
    .ci/run provides it, so its absence there is a broken CI, not a choice."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: .ci/run must provide it)")
    pytest.skip(reason)


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(port: int, path: str) -> tuple[int, str]:
    """(status, body) of GET http://127.0.0.1:port/path; (0, reason) when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def query(url: str, sql: str, params: Any = None) -> list[dict[str, Any]]:
    """Runs one statement in autocommit; its rows, or [] for a statement that returns none."""
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description is not None else []


def wait_past_restart_quiet(url: str, quiet: timedelta) -> None:
    """Waits until the server has been up longer than `quiet`, the reconciler's quiet period
    after a start (ADR 0007: nothing is taken over within TTL + grace of
    `pg_postmaster_start_time()`). For a test that expects a takeover with a daemon's own
    settings: on a server started moments ago (the README's first run on a fresh embedded
    server) it waits the rest out instead of assuming an old server; on an older one it
    returns at once."""
    wait_for(
        lambda: query(url, "SELECT now() - pg_postmaster_start_time() > %s AS past", (quiet,))[0][
            "past"
        ],
        timeout=quiet.total_seconds() + 10,
        message=f"the server to be up longer than the quiet period ({quiet})",
    )


def nested_plans(
    url: str, sql: str, params: Any, *settings: str, between: Callable[[], object] | None = None
) -> str:
    """The plans of every statement `sql` runs, those inside the functions it calls included
    (the hot path's PL/pgSQL functions: EXPLAIN of the call shows only a Function Scan), as
    auto_explain reports them, with `settings` (SET statements) first; in a transaction rolled
    back afterwards. A function plans on its first call in a session and keeps the plans: with
    `between`, `sql` runs once first, then `between`, then the run whose plans are returned."""
    plans: list[str] = []

    def keep(diagnostic: psycopg.errors.Diagnostic) -> None:
        if "plan:" in (diagnostic.message_primary or ""):
            plans.append(diagnostic.message_primary or "")

    with psycopg.connect(url) as conn:
        try:
            conn.execute("LOAD 'auto_explain'")
        except psycopg.errors.UndefinedFile:  # the embedded wheel's server ships no contrib
            pytest.skip("auto_explain is not installed on this server: no plans inside functions")
        for setting in (
            *settings,
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_nested_statements = on",
            "SET auto_explain.log_level = notice",
            "SET client_min_messages = notice",
        ):
            conn.execute(setting)
        conn.commit()
        if between is not None:
            psycopg.ClientCursor(conn).execute(sql, params)
            conn.rollback()
            between()
        conn.add_notice_handler(keep)
        psycopg.ClientCursor(conn).execute(sql, params)
        conn.rollback()
    assert plans, f"auto_explain reported no plan for {sql[:80]}"
    return "\n".join(plans)


def snapshot(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of the tables a fenced writer must not touch."""
    return {t: query(url, f"SELECT * FROM {t} ORDER BY id") for t in ("task", "occurrence", "run")}


class DaemonProcess:
    """A real `scheduler-daemon run` process against the test database, logging to a file."""

    def __init__(
        self,
        url: str,
        log_dir: Path,
        name: str,
        *args: str,
        env: dict[str, str] | None = None,
        python: str = sys.executable,
        cwd: Path | None = None,
    ) -> None:
        """`python` and `cwd` run another build (tests/chaos/test_mixed_versions.py)."""
        self.url = url
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        argv = [
            python,
            "-m",
            "scheduler_daemon",
            "--log-format",
            "json",
            "run",
            "--instance-id",
            name,
            *FAST,
            *args,
        ]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "SCHEDULER_DATABASE_URL": url, **(env or {})},
                cwd=cwd,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def instance_id(self, timeout: float = 30.0) -> str:
        """Waits until this process registered; its id is its name plus a per-start suffix."""
        rows = wait_for(
            lambda: query(
                self.url, "SELECT id FROM instance WHERE id LIKE %s", (f"{self.name}-%",)
            ),
            timeout=timeout,
            message=f"{self.name} to register",
        )
        return rows[0]["id"]

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def processes_matching(marker: str) -> list[int]:
    """Pids whose command line contains `marker` (zombies excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z" and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


SETTINGS = DaemonSettings(
    instance_prefix="t",
    concurrency=8,
    lease_ttl=timedelta(seconds=3),
    lease_grace=timedelta(seconds=1),
    dispatch_batch=10,
)


class Replica:
    """One daemon's services, in-process, with its own held-run set: built by the daemon's own
    composition root (runtime/root.py), never started; tests call each service's `run_once`."""

    def __init__(
        self,
        url: str,
        pool: Any,
        executors: dict[str, Any],
        name: str,
        settings: DaemonSettings = SETTINGS,
    ) -> None:
        self.held = HeldRuns()
        self.services = build_services(
            pool, url, instance_id=name, settings=settings, held=self.held, executors=executors
        )
        self.launcher = self.services.launcher
        self.completer = self.services.completer
        self.dispatcher = self.services.dispatcher
        self.keeper = self.services.keeper

    def finished(self) -> list[Any]:
        """Waits until every held job has an outcome; returns the held runs in run id order."""
        runs = sorted(self.held, key=lambda r: r.run_id)
        for run in runs:
            run.outcome = wait_for(run.job.poll, message=f"run {run.run_id} to finish")
        return runs


def make_reconciler(
    pool: Any,
    name: str = "rec",
    *,
    quiet: timedelta = timedelta(0),
    max_interruptions: int = 3,
    page: int = 100,
) -> Any:
    """A Reconciler as the service tests build it: no quiet period after a server start, three
    interruptions, dead after ten minutes; tests call its `run_once`."""
    from scheduler_daemon.services.reconciler import Reconciler

    kept = {"max_interruptions": max_interruptions, "dead_after": timedelta(minutes=10)}
    return Reconciler(pool, instance_id=name, restart_quiet=quiet, page=page, **kept)


def task_record(
    spec: Any, *, status: str, next_run_at: datetime | None, created_at: datetime
) -> Any:
    """Task 1's row as the store returns it, for the unit tests: `spec` (a TaskSpec) at
    `status`, due at `next_run_at`, created and last updated at `created_at`, never fired."""
    from scheduler_daemon.domain.task import TaskRecord

    never = dict.fromkeys(("last_status", "last_scheduled_for", "last_finished_at", "last_error"))
    fresh = {"occurrence_seq": 0, "last_outcome_seq": 0, "deleted_at": None, **never}
    times = {"next_run_at": next_run_at, "created_at": created_at, "updated_at": created_at}
    return TaskRecord(id=1, spec=spec, status=status, **times, **fresh)


def shell_task(client: Any, name: str = "job", command: str = "true", **kw: Any) -> Any:
    """An hourly shell task (tests trigger it by hand), added through the real Client; `kw`
    sets any other field of its TaskSpec, `every` included."""
    from scheduler_daemon.domain.task import TaskSpec

    spec = {"every": timedelta(hours=1), **kw}
    return client.add_task(TaskSpec(name=name, executor="shell", target=command, **spec))


class LaunchedRun(NamedTuple):
    """What `launched_shell_run` arranged; unpacks as (task, occurrence, replica, run)."""

    task: Any
    occurrence: dict[str, Any]
    replica: Replica
    run: HeldRun  # the replica's one held run, its job started


def launched_shell_run(
    client: Any,
    pool: Any,
    executors: dict[str, Any],
    url: str,
    *,
    name: str = "job",
    command: str = "true",
    instance: str = "a",
    **kw: Any,
) -> LaunchedRun:
    """The arrange block of the service tests: an hourly shell task (`shell_task`, `kw` passed
    on), triggered once by hand, claimed and launched by one in-process replica named
    `instance`. Fails the test unless exactly that one run was launched."""
    task = shell_task(client, name, command, **kw)
    occurrence = client.trigger(task.id, requested_by="test")
    replica = Replica(url, pool, executors, instance)
    result = replica.launcher.run_once()
    assert result.launched == 1, result
    (run,) = list(replica.held)
    return LaunchedRun(task, occurrence, replica, run)


def launched_shell_runs(
    client: Any, pool: Any, executors: dict[str, Any], url: str, count: int, **kw: Any
) -> tuple[Any, Replica]:
    """`count` firings of one hourly shell task that allows overlap (`shell_task`, `kw` passed
    on), triggered by hand, claimed and launched by one in-process replica "a": (the task, the
    replica). Fails the test unless all `count` were launched."""
    task = shell_task(client, overlap="allow", **kw)
    for _ in range(count):
        client.trigger(task.id, requested_by="test")
    replica = Replica(url, pool, executors, "a")
    assert replica.launcher.run_once().launched == count
    return task, replica


def finished_in_sequence(replica: Replica, url: str) -> list[Any]:
    """`replica.finished()`, ordered by their occurrences' sequence (a held run knows only its
    occurrence id)."""
    rows = query(url, "SELECT id, occurrence_seq FROM occurrence")
    seq = {row["id"]: row["occurrence_seq"] for row in rows}
    return sorted(replica.finished(), key=lambda r: seq[r.occurrence_id])


@contextlib.contextmanager
def answering(body: bytes) -> Iterator[str]:
    """A local HTTP receiver answering every POST with 200 and `body`; yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()


class PostServer(ThreadingHTTPServer):
    """A local HTTP server on 127.0.0.1: each POST's body and headers go to `answer`, whose
    return is the status it is answered with (an empty body)."""

    def __init__(self, answer: Callable[[bytes, dict[str, str]], int]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(answer(body, dict(self.headers)))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


class NotificationReceiver(PostServer):
    """A local notify URL: records every POST (its JSON body, headers and the status it was
    answered); answers 500 to the first `fail` POSTs of each delivery_id, and to the first POST
    of a share `flaky` of the ids (decided per id from `seed`), 200 otherwise."""

    def __init__(self, fail: int = 0, *, flaky: float = 0.0, seed: int = 0) -> None:
        self.fail, self.flaky, self.seed = fail, flaky, seed
        self.received: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        super().__init__(self._answer)

    def _answer(self, raw: bytes, headers: dict[str, str]) -> int:
        body = json.loads(raw)
        with self.lock:
            seen = sum(r["body"]["delivery_id"] == body["delivery_id"] for r in self.received)
            status = 500 if self.refuses(body["delivery_id"], seen) else 200
            self.received.append({"body": body, "headers": headers, "status": status})
        return status

    def refuses(self, delivery_id: str, seen: int) -> bool:
        """Whether the POST of `delivery_id` after `seen` earlier ones is answered 500."""
        if seen < self.fail:
            return True
        return seen == 0 and random.Random(f"{self.seed} {delivery_id}").random() < self.flaky

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"

    def copies(self) -> dict[str, list[dict[str, Any]]]:
        """The POSTs received, by delivery_id."""
        by_id: dict[str, list[dict[str, Any]]] = {}
        with self.lock:
            for r in self.received:
                by_id.setdefault(r["body"]["delivery_id"], []).append(r)
        return by_id

    def close(self) -> None:
        self.shutdown()
        self.server_close()


OLD_INSTANCE = (
    "INSERT INTO instance (id, hostname, pid, version, schema_revision, concurrency, lease_ttl, "
    "lease_grace, reconcile_interval) VALUES (%s, 'old-host', 1, '0.9.0', %s, 1, '9s', '3s', '3s')"
)
"""An instance row of an older build: (id, its schema revision)."""


def write_during_registration(
    database_url: str, write: Callable[[], Any], instance: str, revision: str
) -> BaseException | None:
    """Forces a write into an older build's registration: a session holds the schema
    compatibility lock shared and has inserted the build's (uncommitted) instance row, as a
    registration in progress does; `write` runs on a thread and must wait for that lock (the
    test fails if it finishes first); then the registration commits. Returns what `write`
    raised (None: it succeeded). A check that read the instances without the lock, or before
    its wait, would see no row and let the write through."""
    from scheduler_daemon.storage import migration

    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            write()
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)
        else:
            outcome.append(None)

    with psycopg.connect(database_url) as registering:
        registering.execute("SELECT pg_advisory_xact_lock_shared(%s)", (migration.COMPAT_LOCK_KEY,))
        registering.execute(OLD_INSTANCE, (instance, revision))
        writing = threading.Thread(target=run)
        writing.start()
        wait_for(
            lambda: (
                not writing.is_alive()
                or query(
                    database_url,
                    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
                )
            ),
            message="the write to wait for the registration's lock",
        )
        assert writing.is_alive(), f"the write did not wait for the registration: {outcome}"
        registering.commit()
    writing.join(30)
    (error,) = outcome
    return error


class RawReceiver:
    """A notify URL on 127.0.0.1 speaking raw bytes: each connection's request is read (up to
    its headers and Content-Length body), then `answer(send)` writes what it likes through
    `send` (bytes; False once the peer is gone) — a drip, a broken status line. Counts the
    connections open at once (`most_open`). `close()` ends every answer at once."""

    def __init__(self, answer: Callable[[Callable[[bytes], bool]], None]) -> None:
        self.answer = answer
        self.closing = threading.Event()
        self.lock = threading.Lock()
        self.open = self.most_open = self.requests = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/hook"

    def drip(self, status: bytes = b"HTTP/1.1 200 OK\r\n", every: float = 1.0) -> None:
        """An `answer`: `status`, then a header one byte every `every` seconds, never ending."""

        def answer(send: Callable[[bytes], bool]) -> None:
            if not send(status):
                return
            for byte in b"X-Slow: " + b"y" * 100_000:
                if self.closing.wait(every) or not send(bytes([byte])):
                    return

        self.answer = answer

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            while len(body) < length and (chunk := conn.recv(65536)):
                body += chunk
            with self.lock:
                self.requests += 1
                self.open += 1
                self.most_open = max(self.most_open, self.open)

            def send(data: bytes) -> bool:
                try:
                    conn.sendall(data)
                except OSError:
                    return False
                return True

            try:
                self.answer(send)
            finally:
                with self.lock:
                    self.open -= 1

    def close(self) -> None:
        self.closing.set()
        self._listener.close()
