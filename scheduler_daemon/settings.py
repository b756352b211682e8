"""Where configuration comes from: flags, then SCHEDULER_* variables, then the embedded default."""

import os
from dataclasses import dataclass

DATABASE_URL_ENV = "SCHEDULER_DATABASE_URL"


@dataclass(frozen=True)
class Settings:
    """Settings every command shares."""

    database_url: str | None
    log_format: str = "auto"  # auto: JSON off a terminal, console on one
    log_level: str = "info"


def resolve_database_url(url: str | None) -> str:
    """The configured URL (flag or SCHEDULER_DATABASE_URL), else the embedded server's."""
    url = url or os.environ.get(DATABASE_URL_ENV) or None
    if url:
        return url
    from scheduler_daemon import embedded

    embedded_url = embedded.acquire()
    embedded.install_signal_handlers()
    structlog.get_logger().info(
        "embedded_database_in_use",
        data_dir=str(embedded.data_dir()),
        hint=f"a fleet of daemons on several hosts needs {DATABASE_URL_ENV}",
    )
    return embedded_url
