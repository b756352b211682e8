"""What each console page reads, through the Client, every read bounded (a page size, a window,
a LIMIT in the named query), and shaped by presentation.py as the CLI shows it: secrets masked
as `tasks export` masks them, no database URL anywhere."""

from datetime import timedelta
from typing import Any

from scheduler_daemon import presentation
from scheduler_daemon.client import Client
from scheduler_daemon.console.chart import Point, chart
from scheduler_daemon.domain import health
from scheduler_daemon.domain.schedule.words import cron_words, dst_notes
from scheduler_daemon.domain.spread import spread_start
from scheduler_daemon.domain.status import TaskStatus

TASKS_PAGE = 50  # tasks per page of the task list
JUDGE_AT_MOST = 5000  # tasks the verdict filter judges per page (ADR 0023), then "more"
HISTORY_ROWS = 100  # history rows on a task page (a cursor continues)
CHART_RUNS = 60  # runs the chart draws
RUNNING_ROWS = 200  # rows of "running now"
NEXT_FIRINGS = 10
TAKEOVER_WINDOW = timedelta(hours=1)
TAKEOVER_CAP = 1000  # shown as "1000+"
VERDICTS = tuple(str(v) for v in health.Verdict)
STATUSES = tuple(str(s) for s in TaskStatus)


def fleet(client: Client) -> dict[str, Any]:
    """Instances with build, state and heartbeat age; budget in use; queue depth; takeovers in
    the last hour (from the run rows)."""
    status = presentation.status_fields(client.status())
    takeovers = client.takeovers_since(TAKEOVER_WINDOW, cap=TAKEOVER_CAP)
    return {
        "status": status,
        "instances": presentation.instances_table_rows(status["instances"]),
        "takeovers": f"{takeovers}+" if takeovers >= TAKEOVER_CAP else str(takeovers),
        "actions": client.recent_actions(limit=20),
    }


def tasks(
    client: Client,
    *,
    prefix: str | None,
    status: str | None,
    verdict: str | None,
    after: str | None,
) -> dict[str, Any]:
    """One page of tasks by name (prefix and status filters), or by health verdict (the
    tasks judged so, by name, judging at most JUDGE_AT_MOST tasks a page)."""
    if verdict:
        judged = client.verdict_page(
            verdict, limit=TASKS_PAGE, judge_at_most=JUDGE_AT_MOST, after=after
        )
        rows = [presentation.health_fields(r) for r in judged.rows]
        return {
            "health_rows": rows,
            "rows": None,
            "after": judged.after,
            "judged": judged.judged,
            "judge_at_most": JUDGE_AT_MOST,
        }
    page = client.tasks_page(
        limit=TASKS_PAGE, after=after, prefix=prefix or None, status=status or None
    )
    rows = [presentation.task_fields(t) for t in page.rows]
    return {"rows": rows, "health_rows": None, "after": page.after}


def task(client: Client, task_id: int, *, after: str | None) -> dict[str, Any]:
    """A task: its definition (secrets masked), schedule in words, next firings in its zone and
    in UTC with DST notes (past the ones its calendars exclude, saying how many and why), its
    health, its history a page at a time, the run chart, and the actions recorded on it."""
    record = client.get_task(task_id)
    fields = presentation.task_fields(record)
    zone = record.spec.timezone
    # As `tasks next`: past the firings the task's calendars exclude, each shown with the
    # excluded ones passed over just before it.
    firings = (
        client.next_firings(record.id, NEXT_FIRINGS)
        if record.status == TaskStatus.ENABLED and record.deleted_at is None
        else []
    )
    upcoming = [f.at for f in firings]
    words = (
        cron_words(record.spec.cron, zone)
        if record.spec.cron is not None
        else presentation.schedule_text(record)
    )
    history = client.runs_page(task=record.id, limit=HISTORY_ROWS, after=after)
    started = [
        Point(r.id, r.scheduled_for, r.started_at, r.finished_at)
        for r in history.rows
        if r.id is not None and r.started_at is not None
    ][:CHART_RUNS]
    return {
        "task": fields,
        "words": words,
        "next": [
            presentation.fire_time_fields(
                f.at, zone, spread_start(record.id, f.at, record.spec.spread)
            )
            | {"excluded": presentation.excluded_note(f.excluded_before, f.excluded_by)}
            for f in firings
        ],
        "spread": record.spec.spread is not None,
        "calendars": bool(record.spec.exclude_calendars),
        "dst_notes": dst_notes(upcoming, zone),
        "health": presentation.health_fields(client.task_health(record.id))
        if record.deleted_at is None
        else None,
        "history": [presentation.run_fields(r) for r in history.rows],
        "after": history.after,
        "chart": chart(started),
        "actions": client.recent_actions(task_id=record.id, limit=20),
    }


def running(client: Client) -> dict[str, Any]:
    """The running runs: owner, lease expiry, takeover point."""
    rows = client.running_now(limit=RUNNING_ROWS)
    return {"rows": rows, "full": len(rows) >= RUNNING_ROWS}


def occurrence(client: Client, occurrence_id: int) -> dict[str, Any]:
    found, runs = client.show_occurrence(occurrence_id)
    return {"occurrence": presentation.occurrence_fields(found, runs)}
