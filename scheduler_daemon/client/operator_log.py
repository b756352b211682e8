"""The Client's record of operators' actions (`operator_action`, revision 0027), read back: the
trigger, pause, resume, cancel and backfill that an `Actor` asks for write it in their own
transactions (operator_action_store.record)."""

from typing import Any

from scheduler_daemon.client.base import ClientBase
from scheduler_daemon.storage import operator_action_store

RECENT_LIMIT = 50
"""The console shows at most this many recorded actions on a page."""


class OperatorLog(ClientBase):
    """Who did what to which task and occurrence, and when (the database clock)."""

    def recent_actions(
        self, *, task_id: int | None = None, limit: int = RECENT_LIMIT
    ) -> list[dict[str, Any]]:
        """The newest recorded actions (of one task), newest first."""
        with self._tx() as conn:
            return operator_action_store.recent(conn, task_id=task_id, limit=limit)
