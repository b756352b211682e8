"""A Patroni cluster the test owns: one etcd and two Patroni-managed PostgreSQL nodes on loopback.

Debian's `patroni` (3.0.2) and `etcd-server` (3.4) with the machine's server binaries (found as
tests/owned_server.py finds them); every process runs as `postgres` when the tests run as root.
Patroni talks to etcd through its `etcd3` section (the v3 JSON gateway, built on python3-etcd's
client), so etcd needs no v2 API. Timings are short (ttl 10, loop_wait 2, retry_timeout 4) and
replication asynchronous with no lag limit on failover, so the replica is promoted about 10-15 s
after its leader dies. Every port is a free one picked at start, so a system etcd or Patroni
service on the default ports changes nothing.

`start()` bootstraps the cluster, creates the database and migrates it; `url()` is the multi-host
URL of both nodes; `leader()` asks the nodes' REST APIs; `switchover()` runs `patronictl
switchover --force` to the replica; `kill_leader()` SIGKILLs the leader's Patroni and its
postmaster together; `stall_replication()` stops the replica's walreceiver and
`drop_stalled_stream()` ends it unread, so a leader killed in between takes its latest commits
along. `close()` stops everything it started and removes its directory.
"""

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from tests.ha.pair import DATABASE, poll, server_binaries
from tests.support import free_port, unavailable

TTL, LOOP_WAIT, RETRY_TIMEOUT = 10, 2, 4
NODES = 2
PATRONI, PATRONICTL, ETCD = (shutil.which(b) for b in ("patroni", "patronictl", "etcd"))


def binaries() -> tuple[str, str, str]:
    """patroni, patronictl and etcd; skipped without them (failed under CI=true)."""
    if not (PATRONI and PATRONICTL and ETCD):
        unavailable("no patroni/patronictl/etcd here (Debian packages patroni and etcd-server)")
    assert PATRONI is not None
    assert PATRONICTL is not None
    assert ETCD is not None
    return PATRONI, PATRONICTL, ETCD


@dataclass
class Node:
    """One Patroni member: its name, directory, ports and the Patroni process once started."""

    name: str
    home: Path
    port: int
    api_port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def config(self) -> Path:
        return self.home / "patroni.yml"

    @property
    def data(self) -> Path:
        return self.home / "data"

    def postmaster_pid(self) -> int | None:
        """The pid of this node's running postmaster, or None: the pid postmaster.pid names,
        if that process still runs on this data directory (a killed server leaves the file,
        and its pid may since belong to someone else)."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            return None
        return pid if str(self.data).encode() in cmdline else None

    def api(self, path: str) -> Any:
        """The JSON answer of GET `path` on this node's REST API (an error status's body too)."""
        url = f"http://127.0.0.1:{self.api_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return json.loads(exc.read() or b"null")


class PatroniCluster:
    """`nodes` in the order of `url()`; `log()` is every process's output, for a failure report."""

    def __init__(self) -> None:
        self.patroni_bin, self.patronictl_bin, self.etcd_bin = binaries()
        self.bin_dir, user = server_binaries()
        self.user = user if os.geteuid() == 0 else None
        self.scope = f"sd-{os.getpid()}-{free_port()}"
        self.home = Path(tempfile.mkdtemp(prefix="scheduler-daemon-patroni-", dir="/var/tmp"))
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.etcd: subprocess.Popen[bytes] | None = None
        self._stalled: list[int] = []  # walreceivers stall_replication() stopped
        self.nodes = [
            Node(f"node{i}", self.home / f"node{i}", free_port(), free_port()) for i in range(NODES)
        ]
        self._chown(self.home)

    # -- processes -------------------------------------------------------------------------
    def _chown(self, path: Path) -> None:
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def _popen(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        """`argv` as the server user in a session of its own (so close() reaches its children),
        output to `log`. Started directly (not via runuser) so its pid is the program's own."""
        with open(log, "ab") as out:
            if self.user:
                self._chown(log)
            return subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.home,
                env={**os.environ, "LC_ALL": "C.UTF-8", "HOME": str(self.home)},
                user=self.user,
                group=pwd.getpwnam(self.user).pw_gid if self.user else None,
                extra_groups=[] if self.user else None,
                start_new_session=True,
            )

    def _start_etcd(self) -> None:
        data = self.home / "etcd"
        data.mkdir(mode=0o700)
        self._chown(data)
        client, peer = (
            f"http://127.0.0.1:{self.etcd_port}",
            f"http://127.0.0.1:{self.etcd_peer_port}",
        )
        self.etcd = self._popen(
            [
                self.etcd_bin,
                *("--name", "etcd0", "--data-dir", str(data)),
                *("--listen-client-urls", client, "--advertise-client-urls", client),
                *("--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer),
                *("--initial-cluster", f"etcd0={peer}", "--initial-cluster-state", "new"),
                *("--initial-cluster-token", self.scope),
            ],
            self.home / "etcd.log",
        )

        def healthy() -> bool:
            assert self.etcd is not None
            if self.etcd.poll() is not None:
                raise AssertionError(f"etcd exited {self.etcd.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=2) as response:
                    return bool(json.loads(response.read()).get("health") == "true")
            except OSError:
                return False

        poll("etcd to answer", healthy, timeout=30)

    def _write_config(self, node: Node) -> None:
        node.home.mkdir()
        self._chown(node.home)
        config = {
            "scope": self.scope,
            "namespace": "/scheduler-daemon-tests/",
            "name": node.name,
            "log": {"level": "INFO"},
            "restapi": {
                "listen": f"127.0.0.1:{node.api_port}",
                "connect_address": f"127.0.0.1:{node.api_port}",
            },
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": LOOP_WAIT,
                    "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 1 << 40,  # async: promote whatever it lacks
                    "synchronous_mode": False,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_level": "replica",
                            "wal_log_hints": "on",
                            "hot_standby": "on",
                            "max_wal_senders": 8,
                            "max_replication_slots": 8,
                            "wal_keep_size": "256MB",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
                "pg_hba": [
                    "local all all trust",
                    "host replication all 127.0.0.1/32 trust",
                    "host all all 127.0.0.1/32 trust",
                ],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.port}",
                "connect_address": f"127.0.0.1:{node.port}",
                "data_dir": str(node.data),
                "bin_dir": str(self.bin_dir),
                "pgpass": str(node.home / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres"},
                    "replication": {"username": "postgres"},
                    "rewind": {"username": "postgres"},
                },
                "parameters": {"unix_socket_directories": str(node.home)},
                "pg_ctl_timeout": 30,
                # pg_basebackup's default spread checkpoint would take minutes on an idle leader
                "basebackup": [{"checkpoint": "fast"}],
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
        }
        # JSON is YAML: Patroni reads it as its configuration file.
        node.config.write_text(json.dumps(config, indent=2))
        self._chown(node.config)

    def _start_node(self, node: Node) -> None:
        node.proc = self._popen([self.patroni_bin, str(node.config)], node.home / "patroni.log")

    # -- the cluster -----------------------------------------------------------------------
    def start(self) -> "PatroniCluster":
        """etcd up, both nodes started at once (the first to take etcd's initialize key
        bootstraps and leads, the other clones it), the database created and migrated on the
        leader, the replica streaming."""
        from scheduler_daemon.storage import migration

        self._start_etcd()
        for node in self.nodes:
            self._write_config(node)
            self._start_node(node)
        leader = poll("a node to lead", self.leader, timeout=90)
        with psycopg.connect(self.node_url(leader, "postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        migration.upgrade(self.node_url(leader))
        self.wait_streaming(timeout=90)
        return self

    def node_url(self, node: Node, database: str = DATABASE) -> str:
        """The single-host URL of `node`."""
        return f"postgresql://postgres@127.0.0.1:{node.port}/{database}"

    def url(self, database: str = DATABASE) -> str:
        """The multi-host URL of both nodes, read-write only: what a fleet is given."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"

    def members(self) -> list[dict[str, Any]]:
        """The cluster's members as the first node whose REST API answers sees them
        (name, role, state, timeline, lag), [] when none answers."""
        for node in self.nodes:
            if node.proc is None or node.proc.poll() is not None:
                continue
            with contextlib.suppress(OSError, ValueError):
                answer = node.api("/cluster")
                if answer and "members" in answer:
                    return list(answer["members"])
        return []

    def leader(self) -> Node | None:
        """The node the cluster calls its running leader, if any."""
        for member in self.members():
            if member.get("role") == "leader" and member.get("state") == "running":
                return self._node(member["name"])
        return None

    def replica(self) -> Node:
        """The node that is not the leader."""
        leader = self.leader()
        (replica,) = [node for node in self.nodes if node is not leader]
        return replica

    def _node(self, name: str) -> Node:
        (node,) = [node for node in self.nodes if node.name == name]
        return node

    def timeline(self, node: Node) -> int:
        """The timeline of `node`'s current WAL (a promotion changes it at once)."""
        with psycopg.connect(self.node_url(node), autocommit=True, connect_timeout=5) as conn:
            row = conn.execute("SELECT pg_walfile_name(pg_current_wal_lsn())").fetchone()
        assert row is not None
        return int(row[0][:8], 16)

    def wait_streaming(self, timeout: float = 60.0) -> None:
        """Until Patroni calls every other member a running replica and the leader's
        pg_stat_replication shows it `streaming` (Patroni names each walreceiver's
        application_name after its member; its base backup's stream too, hence both)."""

        def streaming() -> bool:
            leader = self.leader()
            members = self.members()
            running = [m for m in members if m.get("state") in ("running", "streaming")]
            if leader is None or len(running) < NODES:
                return False
            with psycopg.connect(self.node_url(leader), autocommit=True, connect_timeout=2) as c:
                names = {
                    row[0]
                    for row in c.execute(
                        "SELECT application_name FROM pg_stat_replication WHERE state = 'streaming'"
                    )
                }
            return names >= {node.name for node in self.nodes if node is not leader}

        poll("the replica to stream", streaming, timeout)

    def wait_leader(self, node: Node, timeout: float = 60.0) -> None:
        """Until `node` leads and its server accepts writes."""

        def writable() -> bool:
            if self.leader() is not node:
                return False
            with psycopg.connect(self.node_url(node), autocommit=True, connect_timeout=2) as conn:
                row = conn.execute("SELECT NOT pg_is_in_recovery()").fetchone()
            return bool(row and row[0])

        poll(f"{node.name} to lead and accept writes", writable, timeout)

    def patronictl(self, *args: str) -> str:
        """`patronictl -c <first live node's config> args...`; its output (fails on an error)."""
        node = next(n for n in self.nodes if n.proc is not None and n.proc.poll() is None)
        prefix = ["runuser", "-u", self.user, "--"] if self.user else []
        done = subprocess.run(
            [*prefix, self.patronictl_bin, "-c", str(node.config), *args],
            check=False,
            capture_output=True,
            text=True,
            cwd=self.home,
            timeout=120,
        )
        assert done.returncode == 0, f"patronictl {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout

    def switchover(self, timeout: float = 60.0) -> Node:
        """`patronictl switchover --force` from the leader to the replica; returns the new
        leader once it accepts writes."""
        leader, replica = self.leader(), self.replica()
        assert leader is not None, "no leader to switch over from"
        self.patronictl(
            "switchover", "--leader", leader.name, "--candidate", replica.name, "--force"
        )
        self.wait_leader(replica, timeout)
        return replica

    def stall_replication(self) -> None:
        """SIGSTOP the replica's walreceiver: from now on the leader's commits (asynchronous,
        so nothing waits) stay on the leader and in the socket between them, as over a lagging
        network, until `drop_stalled_stream()` or `resume_replication()`."""
        replica = self.replica()
        with psycopg.connect(self.node_url(replica), autocommit=True, connect_timeout=5) as c:
            row = c.execute("SELECT pid FROM pg_stat_wal_receiver").fetchone()
        assert row is not None, f"{replica.name} has no walreceiver"
        os.kill(row[0], signal.SIGSTOP)
        self._stalled.append(row[0])

    def drop_stalled_stream(self) -> None:
        """End every stalled walreceiver without letting it read what its socket still holds
        (on loopback that can be every commit of the stall): SIGTERM, then SIGCONT, so it
        exits on waking (its latch is set) before it reads again. The recovery process starts
        a new one after wal_retrieve_retry_interval, from whatever leads by then."""
        for pid in self._stalled:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        self.resume_replication()

    def resume_replication(self) -> None:
        """SIGCONT every walreceiver `stall_replication()` stopped."""
        while self._stalled:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._stalled.pop(), signal.SIGCONT)

    def kill_leader(self) -> Node:
        """SIGKILL the leader's Patroni process and its postmaster at once (the backends go when
        they notice their postmaster died); returns the node killed."""
        leader = self.leader()
        assert leader is not None, "no leader to kill"
        assert leader.proc is not None
        postmaster = leader.postmaster_pid()
        assert postmaster is not None, f"{leader.name} runs no postmaster"
        os.kill(leader.proc.pid, signal.SIGKILL)
        os.kill(postmaster, signal.SIGKILL)
        leader.proc.wait(10)
        return leader

    def log(self, lines: int = 40) -> str:
        """The last `lines` of every process's output."""
        parts = []
        for path in sorted(self.home.glob("**/*.log")):
            with contextlib.suppress(OSError):
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path.relative_to(self.home)}\n" + "\n".join(tail))
        return "\n".join(parts)

    def close(self) -> None:
        """Stop every Patroni (it stops its server), then etcd; SIGKILL whatever remains of their
        sessions and of the servers; remove the directory. Safe to call twice."""
        self.resume_replication()  # a stopped walreceiver would hold up its server's shutdown
        procs = [n.proc for n in self.nodes if n.proc is not None]
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
        for node in self.nodes:
            pid = node.postmaster_pid()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        for proc in [*procs, *([self.etcd] if self.etcd else [])]:
            if proc.poll() is None:  # still ours: its pid cannot have been reused
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)  # its session (etcd, a stuck Patroni)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        shutil.rmtree(self.home, ignore_errors=True)
