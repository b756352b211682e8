"""Alembic environment: runs the written-out DDL revisions against the configured database."""

from alembic import context
from sqlalchemy import create_engine, pool

VERSION_TABLE = "scheduler_daemon_alembic_version"

config = context.config


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        literal_binds=True,
        version_table=VERSION_TABLE,
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    # scheduler_daemon.storage.migration gives the URL to libpq itself (`connect`): SQLAlchemy's
    # URL parser refuses a multi-host URL and a keyword DSN.
    connect = config.attributes.get("connect")
    engine = (
        create_engine(config.get_main_option("sqlalchemy.url"), poolclass=pool.NullPool)
        if connect is None
        else create_engine(
            config.get_main_option("sqlalchemy.url"), creator=connect, poolclass=pool.NullPool
        )
    )
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                version_table=VERSION_TABLE,
                transaction_per_migration=True,
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
