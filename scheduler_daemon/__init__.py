"""scheduler-daemon: durable cron for a fleet, coordinated through PostgreSQL alone.

`from scheduler_daemon import Client, TaskSpec` is the Python API; both load lazily so that the
watchdog and worker processes, which import this package, stay light.
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["Client", "TaskSpec", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from scheduler_daemon.client import Client

        return Client
    if name == "TaskSpec":
        from scheduler_daemon.domain.task import TaskSpec

        return TaskSpec
    raise AttributeError(f"module 'scheduler_daemon' has no attribute {name!r}")
