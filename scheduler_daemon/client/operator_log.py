"""The Client's record of operators' actions (`operator_action`, revision 0027): what the CLI
and the web console write after each trigger, pause, resume, cancel and backfill, and read back."""

from typing import Any

from scheduler_daemon.client.base import ClientBase
from scheduler_daemon.domain.status import ActionSource, OperatorAction
from scheduler_daemon.storage import operator_action_store

RECENT_LIMIT = 50
"""The console shows at most this many recorded actions on a page."""


class OperatorLog(ClientBase):
    """Who did what to which task and occurrence, and when (the database clock)."""

    def record_action(
        self,
        action: str,
        *,
        actor: str,
        source: str,
        task_id: int | None = None,
        occurrence_id: int | None = None,
        detail: str | None = None,
    ) -> dict[str, Any]:
        """Records an action that committed, in a short transaction of its own (ADR 0018)."""
        if action not in set(OperatorAction) or source not in set(ActionSource):
            raise ValueError(f"unknown operator action {action!r} from {source!r}")
        with self._tx() as conn:
            return operator_action_store.insert(
                conn,
                actor=actor,
                action=action,
                source=source,
                task_id=task_id,
                occurrence_id=occurrence_id,
                detail=detail,
            )

    def recent_actions(
        self, *, task_id: int | None = None, limit: int = RECENT_LIMIT
    ) -> list[dict[str, Any]]:
        """The newest recorded actions (of one task), newest first."""
        with self._tx() as conn:
            return operator_action_store.recent(conn, task_id=task_id, limit=limit)
