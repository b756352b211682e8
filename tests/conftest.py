"""Test harness: a real PostgreSQL server, a migrated template database, a fresh database per test.

The server is, in order: SCHEDULER_TEST_DATABASE_URL (a server the tests may create databases on),
else the embedded wheel, else a testcontainers PostgreSQL when a Docker engine answers; otherwise
the suite stops at once saying how to provide one.
"""

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from hypothesis import HealthCheck, settings

# A derandomized profile: the same examples on every run, so CI is repeatable and its time
# bounded. Loaded when CI=true; a test that talks to the database takes it as its parent always.
settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
if os.environ.get("CI", "").lower() == "true":
    settings.load_profile("ci")

SERVER_ENV = "SCHEDULER_TEST_DATABASE_URL"
EMBEDDED_TEST_DIR = Path(
    os.environ.get("SCHEDULER_TEST_EMBEDDED_DIR", "/var/tmp/scheduler-daemon-tests/embedded")
)


# Real-process tiers: tests/chaos (daemons under faults), tests/ha (a streaming pair, failovers)
# and tests/browser (the web console in a headless chromium).
SERIAL_DIRS = tuple(Path(__file__).parent / tier for tier in ("chaos", "ha", "browser"))


def _in_serial_dir(path: Path) -> bool:
    return any(path == d or d in path.parents for d in SERIAL_DIRS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test in tests/chaos, tests/ha and tests/browser is `serial`: real daemons or servers
    under faults, timed against each other, one at a time. A plain `pytest` (the README's
    command) leaves them out; `-m serial` runs them (after it, in .ci/run), and so does naming a
    path under them."""
    for item in items:
        if _in_serial_dir(item.path):
            item.add_marker(pytest.mark.serial)
    named = [Path(arg.split("::", 1)[0]).resolve() for arg in config.args]
    if config.option.markexpr or any(_in_serial_dir(p) for p in named):
        return
    serial = [item for item in items if _in_serial_dir(item.path)]
    if serial:
        config.hook.pytest_deselected(items=serial)
        items[:] = [item for item in items if not _in_serial_dir(item.path)]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("soak", "the fault soak (tests/chaos/test_soak.py)")
    group.addoption(
        "--soak-seed", type=int, default=None, help="seed of the fault driver (default: random)"
    )
    group.addoption(
        "--soak-seconds", type=float, default=110.0, help="how long faults are injected"
    )


@dataclass(frozen=True)
class SoakOptions:
    seed: int
    seconds: float


@pytest.fixture
def soak(request: pytest.FixtureRequest) -> SoakOptions:
    """The soak's seed (--soak-seed, else SCHEDULER_SOAK_SEED, else a fresh one, printed by the
    soak) and how long it injects faults."""
    seed = request.config.getoption("--soak-seed")
    if seed is None:
        seed = int(os.environ.get("SCHEDULER_SOAK_SEED") or int.from_bytes(os.urandom(2)))
    return SoakOptions(seed, float(request.config.getoption("--soak-seconds")))


def with_database(url: str, name: str) -> str:
    """`url` pointing at database `name` instead."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def _embedded_server() -> str | None:
    try:
        from scheduler_daemon import embedded
    except ImportError:
        return None
    try:
        return embedded.acquire(EMBEDDED_TEST_DIR)
    except embedded.EmbeddedUnavailable:
        return None


def _container_server(request: pytest.FixtureRequest) -> str | None:
    try:
        import docker
        from testcontainers.postgres import PostgresContainer

        docker.from_env(timeout=2).ping()
    except Exception:
        return None
    container = PostgresContainer("postgres:16-alpine", driver=None)
    container.start()
    request.addfinalizer(container.stop)
    return container.get_connection_url()


@pytest.fixture(scope="session")
def server_url(request: pytest.FixtureRequest) -> str:
    """A URL of a server on which the tests may create and drop databases."""
    url = os.environ.get(SERVER_ENV) or _embedded_server() or _container_server(request)
    if not url:
        pytest.exit(
            f"no PostgreSQL for the tests: set {SERVER_ENV}=postgresql://postgres@127.0.0.1:5432/"
            "postgres, or install the 'embedded' extra, or run a Docker engine",
            returncode=3,
        )
    return url


def _admin(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


@pytest.fixture(scope="session")
def template_url(server_url: str) -> Iterator[str]:
    """A database migrated to head once per session (one step, the baseline 0038); every test
    database is a copy of it."""
    from scheduler_daemon.storage import migration

    name = f"sd_template_{os.getpid()}"
    with _admin(server_url) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    url = with_database(server_url, name)
    migration.upgrade(url)
    yield url
    with _admin(server_url) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _fresh_database(server_url: str, template: str | None) -> Iterator[str]:
    name = f"sd_test_{uuid.uuid4().hex[:12]}"
    clause = f" TEMPLATE {urlsplit(template).path.lstrip('/')}" if template else ""
    with _admin(server_url) as conn:
        conn.execute(f"CREATE DATABASE {name}{clause}")
    try:
        yield with_database(server_url, name)
    finally:
        with _admin(server_url) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def database_url(server_url: str, template_url: str) -> Iterator[str]:
    """A fresh, migrated database of this test's own, dropped afterwards."""
    yield from _fresh_database(server_url, template_url)


@pytest.fixture
def empty_database_url(server_url: str) -> Iterator[str]:
    """A fresh database with no schema at all (for migration tests)."""
    yield from _fresh_database(server_url, None)


@pytest.fixture
def db(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the test database with dict rows, for setup and assertions."""
    from psycopg.rows import dict_row

    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        yield conn


@pytest.fixture
def client(database_url: str) -> Iterator[Any]:
    from scheduler_daemon.client import Client

    with Client(database_url) as client:
        yield client


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def cli(database_url: str, capsys: pytest.CaptureFixture[str]) -> Iterator[Any]:
    """Runs the real `scheduler-daemon` entry point in-process against the test database."""
    from scheduler_daemon.cli import main

    def run(*args: str, url: str | None = database_url) -> CliResult:
        argv = (["--database-url", url] if url else []) + ["--log-level", "warning", *args]
        capsys.readouterr()
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        else:
            code = 0
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    yield run
    import structlog

    from scheduler_daemon import logconfig

    structlog.reset_defaults()  # the CLI configured logging for its own run only
    logconfig.unroute_stdlib()


def row_counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Rows per table, to assert that a refused command wrote nothing (the calendar tables
    when the schema has them: test_from_0037 counts a database of the chain before the squash,
    and a synthetic chain's test may run below the head)."""
    from psycopg.rows import tuple_row

    tables = ("task", "occurrence", "run", "instance", "fleet_setting")
    tables += ("calendar", "calendar_date", "task_calendar")
    with conn.cursor(row_factory=tuple_row) as cur:
        present = [
            t
            for t in tables
            if cur.execute("SELECT to_regclass(%s)", (t,)).fetchone()[0] is not None  # type: ignore[index]
        ]
        return {
            t: cur.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # type: ignore[index]
            for t in present
        }


@pytest.fixture
def counts(db: psycopg.Connection[Any]) -> Any:
    """Call it to get the row count of every table."""
    return lambda: row_counts(db)


@pytest.fixture
def owned_server() -> Iterator[Any]:
    """A stopped, initialised server of this test's own (call .start(), .stop(), .restart())."""
    from tests.owned_server import OwnedServer, find_bin_dir

    found = find_bin_dir()
    if found is None:
        pytest.skip("no PostgreSQL server binaries here (install the 'embedded' extra)")
    server = OwnedServer(*found).init()
    yield server
    server.destroy()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Any]:
    """Starts real `scheduler-daemon run` processes; any still alive at teardown is killed."""
    from tests.support import DaemonProcess

    started: list[DaemonProcess] = []

    def start(url: str, name: str, *args: str, **kw: Any) -> DaemonProcess:
        started.append(DaemonProcess(url, tmp_path, name, *args, **kw))
        return started[-1]

    yield start
    for daemon in started:
        daemon.kill()


@pytest.fixture
def pool(database_url: str) -> Iterator[Any]:
    """A connection pool on the test database, as a daemon's services use."""
    from scheduler_daemon.storage.database import make_pool

    pool = make_pool(database_url, max_size=4, name="test")
    pool.open(wait=True)
    yield pool
    pool.close()


@pytest.fixture
def executors(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The real executors (shell watchdog, http, python workers), closed afterwards."""
    import threading

    from scheduler_daemon.executors import make_executors

    executors = make_executors(threading.Event(), tmp_path)
    yield executors
    for executor in executors.values():
        executor.close()
