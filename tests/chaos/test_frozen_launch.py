"""A daemon frozen between its claim and its job's start must not start the job after a peer
took the run over (issue 31 item 2, guarantee 5: no overlap for `forbid`).

The window is forced with real processes: a second session holds the fleet budget's advisory
lock, so the daemon's claim waits for it; the daemon is SIGSTOPped while it waits; the lock is
let go, and the claim commits on the server while its sender is frozen. A peer takes the run
over once its lease lapses and retries it: its request stays open at a local receiver, which
records every request's occurrence and lease token. Then the frozen daemon is thawed.

On 518d2f3 the thawed daemon started its http job at once (the request thread sent it before
anything looked at the trust deadline), and the receiver saw token 1 open beside token 2 of the
same `forbid` occurrence: this test fails there with the overlap. Fixed, the launcher refuses
the job (`run_not_started`, scheduler_daemon_runs_not_started_total) and no second request
ever opens."""

import json
import os
import re
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
import pytest

from scheduler_daemon.storage.fleet_store import BUDGET_LOCK_KEY
from tests.support import free_port, http_get, query, wait_for

pytestmark = pytest.mark.slow
NOT_STARTED = "not started: trust deadline passed"


class Receiver(ThreadingHTTPServer):
    """Answers every POST after `release` (or 20 s); records which are open at once."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.open: list[tuple[int, int]] = []  # (occurrence id, lease token) of open requests
        self.arrived: list[tuple[int, int]] = []
        self.overlaps: list[tuple[tuple[int, int], list[tuple[int, int]]]] = []
        self.release = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"

    def tokens_open(self) -> list[int]:
        with self.lock:
            return [token for _, token in self.open]


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = (body["occurrence_id"], body["lease_token"])
        receiver = self.server
        with receiver.lock:
            others = [other for other in receiver.open if other[0] == key[0]]
            if others:
                receiver.overlaps.append((key, others))
            receiver.open.append(key)
            receiver.arrived.append(key)
        receiver.release.wait(20)
        with receiver.lock:
            receiver.open.remove(key)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


@contextmanager
def receiving() -> Iterator[Receiver]:
    server = Receiver()
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()


def _claim_waiting_since(url: str, after: Any) -> bool:
    """Whether some session has been waiting for the budget's lock since after `after` (so its
    claim has most of its lock wait left)."""
    rows = query(
        url,
        "SELECT 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
        " WHERE l.locktype = 'advisory' AND NOT l.granted AND a.query_start > %s",
        (after,),
    )
    return bool(rows)


def _events(log: str, event: str) -> list[dict[str, Any]]:
    lines = (line for line in log.splitlines() if f'"{event}"' in line)
    return [e for e in map(json.loads, lines) if e.get("event") == event]


def test_a_daemon_thawed_after_its_runs_takeover_starts_no_job(spawn, cli, database_url) -> None:
    port = free_port()
    with receiving() as receiver:
        add = ("tasks", "add", "hook", "--every", "1h", "--http", receiver.url)
        assert cli(*add, "--overlap", "forbid").code == 0
        frozen = spawn(database_url, "frozen", "--http-port", str(port))
        frozen_id = frozen.instance_id()
        with psycopg.connect(database_url) as holder:
            holder.execute("SELECT pg_advisory_xact_lock(%s)", (BUDGET_LOCK_KEY,))
            assert cli("tasks", "trigger", "hook").code == 0
            (now,) = query(database_url, "SELECT clock_timestamp() AS t")
            wait_for(
                lambda: _claim_waiting_since(database_url, now["t"]),
                timeout=15,
                message="the daemon's claim to wait for the budget lock",
            )
            os.kill(frozen.pid, signal.SIGSTOP)
            holder.rollback()  # the frozen daemon's claim takes the lock and commits
        try:
            (claimed,) = wait_for(
                lambda: query(database_url, "SELECT owner, lease_token FROM run"),
                message="the frozen daemon's claim to commit",
            )
            assert claimed == {"owner": frozen_id, "lease_token": 1}
            peer = spawn(database_url, "peer")
            peer.instance_id()
            wait_for(
                lambda: 2 in receiver.tokens_open(),
                timeout=30,
                message="the peer's retry (token 2) to be open at the receiver",
            )
        finally:
            os.kill(frozen.pid, signal.SIGCONT)
        wait_for(
            lambda: receiver.overlaps or _events(frozen.log(), "run_not_started"),
            timeout=15,
            message="the thawed daemon to refuse its job (or to send it)",
        )
        assert receiver.overlaps == [], (
            f"two requests of one forbid occurrence were open at once: {receiver.overlaps}"
        )
        (refused,) = _events(frozen.log(), "run_not_started")
        assert (refused["error"], refused["lease_token"]) == (NOT_STARTED, 1)
        assert refused["level"] == "warning"
        status, body = http_get(port, "/metrics")
        assert status == 200
        found = re.search(r"^scheduler_daemon_runs_not_started_total (\S+)$", body, re.M)
        assert found is not None
        assert float(found.group(1)) == 1.0
        receiver.release.set()
        wait_for(
            lambda: query(database_url, "SELECT 1 FROM occurrence WHERE status = 'success'"),
            message="the peer's retry to succeed",
        )
    assert receiver.arrived == [(claimed_occurrence(database_url), 2)]
    first, second = query(database_url, "SELECT owner, status, lease_token FROM run ORDER BY id")
    assert (first["owner"], first["status"], first["lease_token"]) == (frozen_id, "interrupted", 1)
    assert (second["status"], second["lease_token"]) == ("success", 2)
    assert frozen.stop() == 0, frozen.log()
    assert peer.stop() == 0, peer.log()


def claimed_occurrence(url: str) -> int:
    (row,) = query(url, "SELECT id FROM occurrence")
    return int(row["id"])
