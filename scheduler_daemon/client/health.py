"""The Client's health of tasks over a window (`tasks health`): one task's, or the fleet's a
page at a time, unhealthy first; the verdicts are domain/health.py's rules."""

from datetime import datetime, timedelta

from scheduler_daemon.client.base import PAGE_SIZE, ClientBase, Page, check_limit, task_ref
from scheduler_daemon.domain import argument, health, limit
from scheduler_daemon.domain.argument import InvalidArgument
from scheduler_daemon.domain.duration import format_duration
from scheduler_daemon.domain.schedule.base import ScheduleError
from scheduler_daemon.storage import health_store, task_store
from scheduler_daemon.storage.error import NotFound

DEFAULT_WINDOW = timedelta(hours=24)


class Health(ClientBase):
    """Each task's verdict and figures over a window; two reads in one transaction: every
    task's signals (the verdicts order the fleet), then the figures of the tasks shown."""

    def task_health(
        self,
        ref: str | int,
        *,
        window: timedelta = DEFAULT_WINDOW,
        attempts: int = health.FAILING_ATTEMPTS,
        now: datetime | None = None,
    ) -> health.Report:
        """One task's health; NotFound for a task that is not live."""
        _check(window, attempts)
        with self._tx() as conn:
            task = task_store.find(conn, task_ref(ref))
            found = health_store.signals(conn, window, task_id=task.id, attempts=attempts, now=now)
            if not found:
                raise NotFound(f"unknown task '{ref}' (deleted)")
            (one,) = found
            figures = health_store.windows(conn, [one.id], window, now=one.signals.now)
        return _report(one, health.judge(one.signals), figures[one.id], window)

    def health_page(
        self,
        *,
        window: timedelta = DEFAULT_WINDOW,
        limit: int | None = PAGE_SIZE,
        after: str | None = None,
        attempts: int = health.FAILING_ATTEMPTS,
        verdict: str | None = None,
        now: datetime | None = None,
    ) -> Page:
        """One page of the live tasks' health, unhealthy first (by the verdicts' order), ties by
        name (byte order), after the cursor `after`; `limit` None: all. `Page.after` is the
        next page's cursor, None after the last. `verdict`: only the tasks judged so."""
        _check(window, attempts)
        check_limit(limit)
        argument.search_text("--after", after)
        try:
            start = None if after is None else health.after_cursor(after)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        with self._tx() as conn:
            judged = [
                (health.judge(s.signals), s)
                for s in health_store.signals(conn, window, attempts=attempts, now=now)
            ]
            if verdict is not None:
                judged = [p for p in judged if p[0].verdict == verdict]
            judged.sort(key=lambda pair: (pair[0].rank, pair[1].name.encode()))
            if start is not None:
                key = (start[0], start[1].encode())
                judged = [p for p in judged if (p[0].rank, p[1].name.encode()) > key]
            more = limit is not None and len(judged) > limit
            shown = judged[:limit] if limit is not None else judged
            clock = shown[0][1].signals.now if shown else now
            figures = health_store.windows(conn, [s.id for _, s in shown], window, now=clock)
        rows = [_report(s, verdict, figures[s.id], window) for verdict, s in shown]
        last = shown[-1] if more else None
        return Page(rows, None if last is None else health.cursor(last[0], last[1].name))


def _check(window: timedelta, attempts: int) -> None:
    if window > health.MAX_WINDOW:
        raise InvalidArgument(
            f"--window {format_duration(window)} is past its limit "
            f"({format_duration(health.MAX_WINDOW)})"
        )
    if window <= timedelta(0):
        raise InvalidArgument("--window must be positive")
    argument.at_least_one(attempts, "--failing-after")
    if attempts > limit.MAX_FAILING_AFTER:
        raise InvalidArgument(f"--failing-after must be at most {limit.MAX_FAILING_AFTER}")


def _report(
    one: health_store.TaskSignals,
    verdict: health.Health,
    figures: health_store.Window,
    window: timedelta,
) -> health.Report:
    owed, exact = 0, True
    if one.signals.owes:
        try:
            schedule = figures.task.spec.schedule()
        except ScheduleError:  # the dispatcher parks it; nothing to count by
            owed, exact = 0, False
        else:
            owed, exact = health.owed_firings(schedule, one.signals, one.signals.now - window)
    return health.Report(
        task_id=one.id,
        name=one.name,
        health=verdict,
        window=window,
        counts=health.count(figures.groups),
        owed=owed,
        owed_exact=exact,
        runs=figures.runs,
        outlasting=figures.outlasting,
        wait_p50=figures.wait_p50,
        wait_p99=figures.wait_p99,
        run_p50=figures.run_p50,
        run_p99=figures.run_p99,
        next_run_at=figures.task.next_run_at,
    )
