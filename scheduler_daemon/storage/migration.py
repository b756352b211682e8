"""Runs the alembic migrations shipped with the package: upgrade, check, offline SQL, revisions."""

import io

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from scheduler_daemon.storage.database import connect
from scheduler_daemon.storage.resource import resource_dir

VERSION_TABLE = "scheduler_daemon_alembic_version"


def sqlalchemy_url(url: str) -> str:
    """The libpq URL with SQLAlchemy's psycopg 3 driver named."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _config(url: str, output: io.StringIO | None = None) -> Config:
    cfg = Config(output_buffer=output) if output is not None else Config()
    cfg.set_main_option("script_location", str(resource_dir("migrations")))
    # ConfigParser interpolation treats % specially; escape it in URLs.
    cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(url).replace("%", "%%"))
    return cfg


def head_revision() -> str:
    """The revision this build expects."""
    head = ScriptDirectory.from_config(_config("postgresql://")).get_current_head()
    assert head is not None
    return head


def current_revision(url: str) -> str | None:
    """The revision the database is at, None when it was never migrated."""
    with connect(url, autocommit=True) as conn:
        exists = conn.execute("SELECT to_regclass(%s) AS t", (VERSION_TABLE,)).fetchone()
        if exists is None or exists["t"] is None:
            return None
        row = conn.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchone()  # noqa: S608
        return None if row is None else row["version_num"]


def upgrade(url: str, revision: str = "head") -> None:
    connect(url).close()  # a one-line DatabaseUnavailable instead of a SQLAlchemy traceback
    command.upgrade(_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    connect(url).close()
    command.downgrade(_config(url), revision)


def offline_sql(url: str | None = None) -> str:
    """The DDL `upgrade head` would run, as text, without touching a database."""
    output = io.StringIO()
    command.upgrade(_config(url or "postgresql://", output), "head", sql=True)
    return output.getvalue()


def is_current(url: str) -> tuple[bool, str | None, str]:
    """(at head?, current revision, head revision)."""
    current, head = current_revision(url), head_revision()
    return current == head, current, head
