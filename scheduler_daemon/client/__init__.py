"""The Python API for defining and inspecting tasks; the `tasks`, `runs`, `config` commands use it.

Each call is one short transaction on the Client's one reused connection (opened on first use,
reopened after a fork or a lost connection; `close()` or `with Client(...)` ends it). Every time it
reads comes from the database clock (`now` pins it in tests), and every multi-row change locks the
task row first. `add_tasks` and `trigger(count=N)` do many rows in one transaction.
"""

from scheduler_daemon.client.audit import Audit
from scheduler_daemon.client.base import ALL_PAGE_SIZE, PAGE_SIZE, Page
from scheduler_daemon.client.calendars import Calendars, NextFiring
from scheduler_daemon.client.definition import TaskDefinition
from scheduler_daemon.client.fleet import Fleet
from scheduler_daemon.client.health import Health
from scheduler_daemon.client.history import Cancellation, History, history_cursor
from scheduler_daemon.client.operator_log import OperatorLog
from scheduler_daemon.client.trigger import (
    MAX_TRIGGER_COUNT,
    TriggerBatch,
    Triggering,
    trigger_text,
)

__all__ = [
    "ALL_PAGE_SIZE",
    "MAX_TRIGGER_COUNT",
    "PAGE_SIZE",
    "Cancellation",
    "Client",
    "NextFiring",
    "Page",
    "TriggerBatch",
    "history_cursor",
    "trigger_text",
]


class Client(TaskDefinition, Triggering, History, Fleet, Health, OperatorLog, Calendars, Audit):
    """Task management against one database. `database_url=None` resolves it from the settings
    (SCHEDULER_DATABASE_URL, else the embedded server). One connection, reused by every call and
    shared by threads in turn; safe to keep across `fork` (the child opens its own) and through
    PgBouncer in transaction mode. Close it with `close()`, or use it as a context manager.

    Its parts, one job each: task definitions (client/definition.py), runs on demand
    (client/trigger.py), history and cancel (client/history.py), the fleet (client/fleet.py),
    health over a window (client/health.py), the record of operators' actions
    (client/operator_log.py), exclusion calendars (client/calendars.py), the audit
    (client/audit.py), over the connection they share (client/base.py)."""
