"""Every command takes the same database URLs: a libpq multi-host URL (the form an HA setup
gives: `postgresql://u@h1:5440,h2:5441/db`) and a keyword DSN with host and port lists, and
every connection asks for a server that accepts writes unless the URL says otherwise."""

import json
import socket
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import PoolTimeout

from scheduler_daemon.storage.database import connect, make_pool
from scheduler_daemon.storage.error import DatabaseUnavailable
from tests.support import EVERY_MINUTE, query, wait_for

pytestmark = pytest.mark.smoke


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port bound by nobody listening: a connection to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def _dead_then_real(url: str, closed_port: int, tmp_path: str, *, form: str) -> str:
    """`url`'s server listed second, after one that refuses connections: a closed loopback
    port (TCP), or a directory without a socket (a Unix-socket server)."""
    params = conninfo_to_dict(url)
    host, port = str(params.get("host") or "localhost"), str(params.get("port") or 5432)
    dead_host, dead_port = (
        ("127.0.0.1", closed_port) if not host.startswith("/") else (tmp_path, port)
    )
    if form == "conninfo":
        return make_conninfo(url, host=f"{dead_host},{host}", port=f"{dead_port},{port}")
    user = quote(str(params.get("user") or ""), safe="")
    password = params.get("password")
    userinfo = user + (f":{quote(str(password), safe='')}" if password else "")
    hosts = f"{quote(dead_host, safe='')}:{dead_port},{quote(host, safe='')}:{port}"
    return f"postgresql://{userinfo}@{hosts}/{quote(str(params['dbname']), safe='')}"


@pytest.mark.parametrize("form", ["url", "conninfo"])
def test_every_command_accepts_a_multi_host_url(
    cli, empty_database_url, closed_port, tmp_path, form
) -> None:
    # On eddeb28 `migrate` ended in a traceback (SQLAlchemy's URL parser: "invalid literal for
    # int() with base 10: '<port>,127.0.0.1:5432'"; a keyword DSN: "Could not parse SQLAlchemy
    # URL"), while the commands that connect through libpq accepted the same URL.
    url = _dead_then_real(empty_database_url, closed_port, str(tmp_path), form=form)

    migrated = cli("migrate", "--json", url=url)
    assert migrated.code == 0, migrated.err
    assert migrated.json()["after"] == migrated.json()["schema"]["this_build"]
    assert cli("migrate", "--check", url=url).code == 0
    added = cli("tasks", "add", "multi", *EVERY_MINUTE, url=url)
    assert added.code == 0, added.err
    for command in (
        ("status", "--json"),
        ("tasks", "list", "--json"),
        ("tasks", "show", "multi"),
        ("runs", "list"),
        ("audit", "--json"),
        ("recover", "--dry-run"),
        ("prune", "--dry-run"),
        ("config", "show"),
    ):
        result = cli(*command, url=url)
        assert result.code == 0, (command, result.err)
    status = json.loads(cli("status", "--json", url=url).out)
    assert status["schema"]["this_build_compatible"] is True


def test_the_daemon_runs_on_a_multi_host_url(
    spawn, database_url, closed_port, tmp_path, cli
) -> None:
    url = _dead_then_real(database_url, closed_port, str(tmp_path), form="url")
    assert cli("tasks", "add", "job", *EVERY_MINUTE, url=url).code == 0
    daemon = spawn(url, "multi")
    daemon.instance_id()
    assert cli("tasks", "trigger", "job", url=url).code == 0
    wait_for(
        lambda: query(database_url, "SELECT 1 FROM run WHERE status = 'success'"),
        message="the triggered run to succeed",
    )
    assert daemon.stop() == 0, daemon.log()


def test_an_unreachable_multi_host_url_is_one_line_naming_each_host_without_the_password(
    cli, closed_port
) -> None:
    url = f"postgresql://admin:s3cret-pw@127.0.0.1:{closed_port},127.0.0.1:1/app"
    for command in (("migrate",), ("status",), ("tasks", "list")):
        result = cli(*command, url=url)
        assert result.code == 1, result.err
        assert result.err.startswith(
            f"error: cannot connect to the database at 127.0.0.1:{closed_port},127.0.0.1:1/app: "
        ), result.err
        assert result.err.count("\n") == 1
        assert "s3cret-pw" not in result.err + result.out


@pytest.fixture
def read_only_url(database_url: str) -> str:
    """The test database, made read-only for every new session (as a demoted primary is)."""
    name = conninfo_to_dict(database_url)["dbname"]
    query(database_url, f"ALTER DATABASE {name} SET default_transaction_read_only = on")
    return database_url


def test_a_connection_refuses_a_server_that_does_not_accept_writes(read_only_url) -> None:
    # On eddeb28 both connected, and the first write failed ("cannot execute UPDATE in a
    # read-only transaction"): a multi-host URL stayed on a demoted primary.
    with pytest.raises(DatabaseUnavailable, match="read-only"):
        connect(read_only_url).close()
    pool = make_pool(read_only_url, max_size=1, name="test")
    try:
        with pytest.raises(PoolTimeout):
            pool.open(wait=True, timeout=2)
    finally:
        pool.close()


def test_a_url_that_sets_target_session_attrs_is_respected(read_only_url) -> None:
    url = make_conninfo(read_only_url, target_session_attrs="any")
    with connect(url, autocommit=True) as conn:
        assert conn.execute("SHOW transaction_read_only").fetchone() == {
            "transaction_read_only": "on"
        }
    pool = make_pool(url, max_size=1, name="test")
    try:
        pool.open(wait=True, timeout=5)
        with pool.connection() as conn:
            row = conn.execute("SHOW transaction_read_only").fetchone()
            assert row == {"transaction_read_only": "on"}
    finally:
        pool.close()
