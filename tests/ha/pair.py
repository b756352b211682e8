"""A streaming replication pair the test owns: a primary and an async standby on loopback ports.

Built on tests/owned_server.py (the machine's server binaries, run as `postgres` under root). The
pair knows the two ports it started on; `url()` is the multi-host URL a fleet is given. It can
switch over (clean stop, a gap, promote), cut the stream so later commits never reach the standby,
stop a server `-m immediate`, promote, and start a former primary on a port no daemon knows, to
count what the promotion lost, or on a port the URL lists, to show it is refused. `close()` stops
both servers and removes their data directories.
"""

import os
import pwd
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from tests.owned_server import OwnedServer, find_bin_dir
from tests.support import free_port, unavailable, wait_for

T = TypeVar("T")

DATABASE = "scheduler"
# Appended to the primary's configuration before its first start; the standby copies it.
PRIMARY_CONF = """
wal_level = replica
max_wal_senders = 8
wal_keep_size = '256MB'
hot_standby = on
"""
PRIMARY_HBA = """
host replication all 127.0.0.1/32 trust
host all all 127.0.0.1/32 trust
"""


def server_binaries() -> tuple[Path, str]:
    """The bin dir and system user of servers that can stream: pg_basebackup among them."""
    found = find_bin_dir()
    if found is None or not (found[0] / "pg_basebackup").exists():
        unavailable("no PostgreSQL server binaries with pg_basebackup here (Debian postgresql)")
    assert found is not None
    return found


def server_url(server: OwnedServer, database: str = DATABASE) -> str:
    """The single-host URL of `server` as it listens now."""
    return f"postgresql://postgres@127.0.0.1:{server.port}/{database}"


def poll(what: str, probe: Callable[[], T], timeout: float = 30.0) -> T:
    """`probe()`'s first truthy answer within `timeout` seconds; a server that does not answer
    yet (starting, promoting) or a standby that has not replayed a table's creation yet counts
    as no."""

    def answer() -> T | None:
        try:
            return probe()
        except (psycopg.OperationalError, psycopg.errors.UndefinedTable):
            return None

    return wait_for(answer, timeout=timeout, interval=0.1, message=what)  # type: ignore[return-value]


def query(server: OwnedServer, sql: str, database: str = DATABASE) -> list[tuple[Any, ...]]:
    """Every row of `sql` run in autocommit on `server`."""
    with psycopg.connect(server_url(server, database), autocommit=True, connect_timeout=5) as c:
        cur = c.execute(sql)  # type: ignore[arg-type]  # the tests' own statements
        return cur.fetchall() if cur.description else []


def epoch(server: OwnedServer) -> tuple[int, int]:
    """(system identifier, timeline) of a primary: the timeline from the current WAL file name,
    which a promotion changes at once (pg_control_checkpoint() lags it)."""
    ((system, walfile),) = query(
        server,
        "SELECT (SELECT system_identifier FROM pg_control_system()),"
        " pg_walfile_name(pg_current_wal_lsn())",
    )
    return int(system), int(walfile[:8], 16)


class ReplicationPair:
    """`primary` and `standby` (None once promoted away); `servers` in the order of `url()`."""

    def __init__(self) -> None:
        bin_dir, user = server_binaries()
        self.servers: list[OwnedServer] = []
        self.primary = self._server(OwnedServer(bin_dir, user))
        self.standby: OwnedServer | None = self._server(OwnedServer(bin_dir, user))
        self.ports = (self.primary.port, self.standby.port)

    def _server(self, server: OwnedServer) -> OwnedServer:
        self.servers.append(server)
        return server

    def start(self) -> "ReplicationPair":
        """Primary up and migrated, the standby cloned from it (pg_basebackup -R) and streaming."""
        from scheduler_daemon.storage import migration

        primary, standby = self.primary, self.standby
        assert standby is not None
        primary.init()
        with (primary.data / "postgresql.conf").open("a") as conf:
            conf.write(PRIMARY_CONF)
        with (primary.data / "pg_hba.conf").open("a") as hba:
            hba.write(PRIMARY_HBA)
        primary.start()
        query(primary, f"CREATE DATABASE {DATABASE}", database="postgres")
        migration.upgrade(server_url(primary))
        self._clone(standby, primary)
        standby.start()
        self.wait_streaming()
        return self

    def _clone(self, standby: OwnedServer, primary: OwnedServer) -> None:
        standby.data.mkdir(mode=0o700)
        if standby.user:
            entry = pwd.getpwnam(standby.user)
            os.chown(standby.data, entry.pw_uid, entry.pw_gid)
        standby._run(
            str(standby.bin_dir / "pg_basebackup"),
            *("-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres"),
            *("-D", str(standby.data), "-X", "stream", "-c", "fast", "-R"),
        )
        # -R wrote standby.signal and a primary_conninfo; this one names the standby, so the
        # primary's pg_stat_replication tells which standby streams.
        with (standby.data / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"primary_conninfo = '{self._conninfo(primary.port, standby)}'\n")

    @staticmethod
    def _conninfo(port: int, standby: OwnedServer) -> str:
        return f"host=127.0.0.1 port={port} user=postgres application_name={standby.data.name}"

    def url(self, database: str = DATABASE) -> str:
        """The multi-host URL of the pair's two ports, read-write only: what a fleet is given."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.ports)
        return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"

    def wait_streaming(self, timeout: float = 30.0) -> None:
        """Until the primary's pg_stat_replication shows the standby `streaming`."""
        standby = self.standby
        assert standby is not None
        sql = (
            "SELECT 1 FROM pg_stat_replication"
            f" WHERE application_name = '{standby.data.name}' AND state = 'streaming'"
        )
        poll("the standby to stream", lambda: query(self.primary, sql), timeout)

    def wait_replayed(self, timeout: float = 30.0) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        standby = self.standby
        assert standby is not None
        ((lsn,),) = query(self.primary, "SELECT pg_current_wal_lsn()::text")
        sql = f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn"
        poll("the standby to replay", lambda: query(standby, sql)[0][0], timeout)

    def promote(self, server: OwnedServer | None = None, timeout: float = 60.0) -> None:
        """Promote the standby (or `server`) and wait until it is out of recovery; it becomes
        `primary`, and the pair has no standby."""
        server = server or self.standby
        assert server is not None
        query(server, f"SELECT pg_promote(wait => true, wait_seconds => {int(timeout)})")
        poll(
            "the promotion", lambda: not query(server, "SELECT pg_is_in_recovery()")[0][0], timeout
        )
        self.primary, self.standby = server, None

    def switchover(self, gap_seconds: float) -> None:
        """A planned switchover with a gap: the primary stopped cleanly (`-m fast` sends the
        standby everything, the shutdown checkpoint included), `gap_seconds` with no primary at
        all, then the standby promoted."""
        self.primary.stop()
        time.sleep(gap_seconds)
        self.promote()

    def cut_stream(self, timeout: float = 30.0) -> None:
        """Point the standby's primary_conninfo at a closed port and reload: from the moment this
        returns (the primary has no walsender for it), no commit on the primary reaches it."""
        standby = self.standby
        assert standby is not None
        conninfo = self._conninfo(free_port(), standby)
        query(standby, f"ALTER SYSTEM SET primary_conninfo = '{conninfo}'")
        query(standby, "SELECT pg_reload_conf()")
        sql = f"SELECT 1 FROM pg_stat_replication WHERE application_name = '{standby.data.name}'"
        poll("the stream to be cut", lambda: not query(self.primary, sql), timeout)

    def stop_immediate(self, server: OwnedServer | None = None) -> None:
        """Stop `server` (default: the primary) `-m immediate`: no checkpoint, no goodbye."""
        (server or self.primary)._ctl("stop", "-m", "immediate")

    def start_isolated(self, server: OwnedServer) -> str:
        """Start a stopped server (a former primary) on a fresh port outside `url()`, so no daemon
        can reach it, and return its single-host URL: for counting what the promotion lost."""
        assert server is not self.primary
        server.port = free_port()
        server.start()
        return server_url(server)

    def start_listed(self, server: OwnedServer, port: int) -> str:
        """Start a stopped server (a former primary, read-write on its own timeline) on `port`,
        one `url()` lists: the split brain an HA tool must fence. Returns its single-host URL."""
        assert port in self.ports
        server.port = port
        server.start()
        return server_url(server)

    def close(self) -> None:
        """Stop every server and remove its data directory (safe to call twice)."""
        for server in self.servers:
            server.destroy()


def running_pair() -> Iterator[ReplicationPair]:
    """The body of a `pair` fixture: a started ReplicationPair, closed however the test ends."""
    pair = ReplicationPair()
    try:
        yield pair.start()
    finally:
        pair.close()
