"""The Client's health of tasks over a window (`tasks health`): one task's, or the fleet's a
page at a time, unhealthy first; the verdicts are domain/health.py's rules."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler_daemon.client.base import PAGE_SIZE, ClientBase, Page, check_limit, task_ref
from scheduler_daemon.domain import argument, health, limit
from scheduler_daemon.domain.argument import InvalidArgument
from scheduler_daemon.domain.duration import format_duration
from scheduler_daemon.domain.schedule.base import ScheduleError
from scheduler_daemon.storage import health_store, task_store
from scheduler_daemon.storage.error import NotFound

DEFAULT_WINDOW = timedelta(hours=24)
JUDGE_BATCH = 1000
"""`verdict_page` judges the tasks this many at a time, in name order."""


@dataclass(frozen=True)
class JudgedPage(Page):
    """A page of the tasks judged `verdict`, and how many tasks were judged to find it."""

    judged: int


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
        now: datetime | None = None,
    ) -> Page:
        """One page of the live tasks' health, unhealthy first (by the verdicts' order), ties by
        name (byte order), after the cursor `after`; `limit` None: all. `Page.after` is the
        next page's cursor, None after the last. Every live task is judged (ADR 0012)."""
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

    def verdict_page(
        self,
        verdict: str,
        *,
        limit: int,
        judge_at_most: int,
        after: str | None = None,
        window: timedelta = DEFAULT_WINDOW,
        attempts: int = health.FAILING_ATTEMPTS,
        now: datetime | None = None,
    ) -> JudgedPage:
        """Up to `limit` live tasks judged `verdict`, by name (byte order) after the cursor
        `after`, judging at most `judge_at_most` tasks, JUDGE_BATCH at a time (ADR 0023):
        the work is bounded whatever the fleet's size. `after` of the page is None once every
        task was judged; else the cursor after the last task shown, or, when the bound was
        reached first, after the last task judged (a page with fewer rows, and more to see)."""
        if verdict not in set(health.Verdict):
            raise InvalidArgument(f"unknown verdict '{verdict}'")
        _check(window, attempts)
        check_limit(limit)
        argument.at_least_one(judge_at_most, "judge_at_most")
        argument.search_text("--after", after)
        try:
            name = None if after is None else health.after_cursor(after)[1]
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        found: list[tuple[health.Health, health_store.TaskSignals]] = []
        judged, done = 0, False
        with self._tx() as conn:
            while len(found) <= limit and judged < judge_at_most:
                batch = min(JUDGE_BATCH, judge_at_most - judged)
                signals = health_store.signals(
                    conn, window, attempts=attempts, now=now, after=name, batch=batch
                )
                for s in signals:
                    judged += 1
                    name = s.name
                    verdict_of = health.judge(s.signals)
                    if verdict_of.verdict == verdict:
                        found.append((verdict_of, s))
                        if len(found) > limit:
                            break
                if len(signals) < batch:
                    done = len(found) <= limit
                    break
            shown = found[:limit]
            clock = shown[0][1].signals.now if shown else now
            figures = health_store.windows(conn, [s.id for _, s in shown], window, now=clock)
        rows = [_report(s, v, figures[s.id], window) for v, s in shown]
        rank = health.RANK[health.Verdict(verdict)]
        if len(found) > limit:
            cursor: str | None = health.cursor(shown[-1][0], shown[-1][1].name)
        elif done or name is None:
            cursor = None
        else:  # the bound reached: go on after the last task judged
            cursor = f"{rank}:{name}"
        return JudgedPage(rows, cursor, judged)


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
    seen: health_store.Window,
    window: timedelta,
) -> health.Report:
    owed, exact = 0, True
    if one.signals.owes:
        try:
            schedule = seen.task.spec.schedule()
        except ScheduleError:  # the dispatcher parks it; nothing to count by
            owed, exact = 0, False
        else:
            owed, exact = health.owed_firings(schedule, one.signals, one.signals.now - window)
    return health.Report(
        task_id=one.id,
        name=one.name,
        health=verdict,
        window=window,
        counts=health.count(seen.groups),
        owed=owed,
        owed_exact=exact,
        figures=seen.figures,
        next_run_at=seen.task.next_run_at,
    )
