"""scheduler-daemon: durable cron for a fleet, coordinated through PostgreSQL alone.

`from scheduler_daemon import Client, TaskSpec` is the Python API; both load lazily so that the
watchdog and worker processes, which import this package, stay light.
"""

from __future__ import annotations

from scheduler_daemon.version import __version__

TYPE_CHECKING = False  # not `typing`: a worker process imports this package, and typing is heavy
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Client", "TaskSpec", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from scheduler_daemon.client import Client

        return Client
    if name == "TaskSpec":
        from scheduler_daemon.domain.task import TaskSpec

        return TaskSpec
    raise AttributeError(f"module 'scheduler_daemon' has no attribute {name!r}")
