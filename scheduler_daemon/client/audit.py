"""The Client's audit: one read-only audit of the recorded history on the Client's own reused
connection (the console's), each check a snapshot of its own, taking turns with its other calls;
`operations.audit` is the CLI's, on a one-connection pool of its own."""

from datetime import timedelta

from scheduler_daemon.client.base import ClientBase
from scheduler_daemon.domain.audit import CHECK_NAMES, DEFAULT_SETTLE, AuditReport
from scheduler_daemon.services.auditor import Auditor, TimeBound


class Audit(ClientBase):
    def audit(
        self,
        *,
        since: TimeBound | None = None,
        until: TimeBound | None = None,
        settle: timedelta = DEFAULT_SETTLE,
        checks: tuple[str, ...] = CHECK_NAMES,
    ) -> AuditReport:
        """The history checked against the invariants (`scheduler-daemon audit`); opens no
        connection beyond the Client's one. InvalidWindow when `since` is not before `until`."""
        auditor = Auditor(self._session, settle=settle, checks=checks)
        return auditor.run_once(since=since, until=until)
