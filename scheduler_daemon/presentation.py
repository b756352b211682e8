"""Turns records into the stable output fields documented in docs/cli.md (formatting only: the
queries return the documented shapes; cli/output.py lays them out as text). What the CLI shows and
the web console (to come) will show alike: schedules in words, masked headers, the JSON fields."""

from collections.abc import Iterable, Mapping
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from scheduler_daemon.domain.audit import AuditReport, Value
from scheduler_daemon.domain.health import Report
from scheduler_daemon.domain.instance import Instance
from scheduler_daemon.domain.liveness import (
    InstanceState,
    fleet_warnings,
    instance_state,
)
from scheduler_daemon.domain.lock_holder import LockHolder
from scheduler_daemon.domain.occurrence import Occurrence
from scheduler_daemon.domain.partitioning import too_few_ahead
from scheduler_daemon.domain.run import HistoryRow, RunDetail, RunOutput
from scheduler_daemon.domain.secret import mask_args, redact, shown_headers
from scheduler_daemon.domain.status import ExecutorKind
from scheduler_daemon.domain.task import TaskRecord
from scheduler_daemon.domain.timing import takeover_bound

# The run row and the run detail of docs/cli.md: the columns sql/run.sql selects, in order.
RUN_FIELDS = tuple(f.name for f in fields(HistoryRow))
RUN_DETAIL_FIELDS = tuple(f.name for f in fields(RunDetail))


def iso(value: datetime | None) -> str | None:
    """ISO 8601 with offset, to the second unless there are fractions."""
    return None if value is None else value.isoformat()


def seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def rounded_seconds(value: timedelta | None) -> float | None:
    """A duration in seconds, to the millisecond."""
    return None if value is None else round(value.total_seconds(), 3)


def schedule_text(task: TaskRecord) -> str:
    spec = task.spec
    if spec.cron is not None:
        return f"cron {spec.cron}"
    if spec.every is not None:
        from scheduler_daemon.domain.duration import format_duration

        return f"every {format_duration(spec.every)}"
    return f"at {iso(spec.at)}"


def task_fields(task: TaskRecord, *, show_secrets: bool = False) -> dict[str, Any]:
    """The documented task object. Secret header values, values that came from a task file's
    `${SCHEDULER_SECRET_*}`, and a URL's password are *** unless `show_secrets`."""
    spec = task.spec
    masked, url = not show_secrets and spec.executor == ExecutorKind.HTTP, spec.notify_url
    return {
        "id": task.id,
        "name": spec.name,
        "schedule_kind": spec.schedule_kind,
        "schedule": schedule_text(task),
        "cron": spec.cron,
        "every_seconds": seconds(spec.every),
        "at": iso(spec.at),
        "timezone": spec.timezone,
        "dst_gap": spec.dst_gap,
        "dst_overlap": spec.dst_overlap,
        "executor": spec.executor,
        "in_process": spec.in_process,
        "target": redact(spec.target) if masked else spec.target,
        "headers": shown_headers(spec.headers, spec.header_refs, show_secrets=show_secrets),
        "concurrency_key": spec.concurrency_key,
        "overlap": spec.overlap,
        "misfire": spec.misfire,
        "misfire_grace_seconds": seconds(spec.misfire_grace),
        "catchup_limit": spec.catchup_limit,
        "catchup_window_seconds": seconds(spec.catchup_window),
        "start_deadline_seconds": seconds(spec.start_deadline),
        "timeout_seconds": seconds(spec.timeout),
        "max_attempts": spec.max_attempts,
        "backoff_seconds": seconds(spec.backoff),
        "backoff_max_seconds": seconds(spec.backoff_max),
        "spread_seconds": seconds(spec.spread),
        "history_retention_seconds": seconds(spec.history_retention),
        "notify_url": url if show_secrets or url is None else redact(url),
        "notify_headers": shown_headers(
            spec.notify_headers, spec.notify_header_refs, show_secrets=show_secrets
        ),
        "notify_on": None if spec.notify_on is None else list(spec.notify_on),
        "deadline_seconds": seconds(spec.deadline),
        "exclude_calendars": list(spec.exclude_calendars),
        "source": task.source,
        "status": task.status,
        "paused": spec.paused,
        "paused_until": iso(task.paused_until),
        "next_run_at": iso(task.next_run_at),
        "occurrence_seq": task.occurrence_seq,
        "last_outcome_seq": task.last_outcome_seq,
        "last_status": task.last_status,
        "last_scheduled_for": iso(task.last_scheduled_for),
        "last_finished_at": iso(task.last_finished_at),
        "last_error": task.last_error,
        "created_at": iso(task.created_at),
        "updated_at": iso(task.updated_at),
        "deleted_at": iso(task.deleted_at),
        "parked_at": iso(task.parked_at),
        "park_error": task.park_error,
        "needs_build": task.needs_build,
    }


def fleet_settings_fields(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The fleet settings as `config show` and `set` print them: secrets (below) as ***."""
    shown = {k.replace("_", "-"): v for k, v in settings.items()}
    if isinstance(shown.get("notify-url"), str):
        shown["notify-url"] = redact(shown["notify-url"])
    if isinstance(shown.get("notify-headers"), dict):
        shown["notify-headers"] = shown_headers(list(shown["notify-headers"].items()))
    return shown


def _json(value: Any) -> Any:
    return iso(value) if isinstance(value, datetime) else value


ERROR_SUMMARY_CHARS = 40
"""At most this many characters of a run's error line in `runs list`'s ERROR column (then `…`)."""


def duration_seconds(started_at: datetime | None, finished_at: datetime | None) -> float | None:
    """A finished run's duration (both ends recorded by the database), to the millisecond;
    None while it runs or when it never started."""
    if started_at is None or finished_at is None:
        return None
    return rounded_seconds(finished_at - started_at)


def error_summary(
    status: str, exit_code: int | None, http_status: int | None, error: str | None
) -> str | None:
    """Why a run did not succeed, in a few words for a table cell. A `failed` run: `HTTP 500` (a
    response outside 2xx), `exit code 3` (a shell job's non-zero exit; `signal 9` for a negative
    one), else its error; any other end (`timeout`, `cancelled`, `interrupted`): its error, else
    those codes. The error is its first line, cut to ERROR_SUMMARY_CHARS characters, with `…`
    when anything was left out (`RuntimeError: boom…`). None for a success, a running run, and a
    row with nothing recorded."""
    if status in ("success", "running"):
        return None
    codes = None
    if http_status is not None and not 200 <= http_status < 300:
        codes = f"HTTP {http_status}"
    elif exit_code is not None and exit_code < 0:
        codes = f"signal {-exit_code}"
    elif exit_code:
        codes = f"exit code {exit_code}"
    text = (error or "").strip()
    if (status == "failed" and codes is not None) or not text:
        return codes
    line = text.splitlines()[0].rstrip()
    if len(line) > ERROR_SUMMARY_CHARS:
        return line[: ERROR_SUMMARY_CHARS - 1].rstrip() + "…"
    return line + "…" if line != text else line


def run_fields(row: HistoryRow) -> dict[str, Any]:
    """A history row (run or never-run occurrence) with the documented field names (its secret
    trigger arguments as ***), then its `duration_seconds` and `error_summary`."""
    out = {name: _json(getattr(row, name)) for name in RUN_FIELDS}
    out["args"] = mask_args(row.args)
    out["duration_seconds"] = duration_seconds(row.started_at, row.finished_at)
    out["error_summary"] = error_summary(row.status, row.exit_code, row.http_status, row.error)
    return out


OCCURRENCE_FIELDS = (
    "id",
    "task_id",
    "task_name",
    "occurrence_seq",
    "scheduled_for",
    "last_scheduled_for",
    "firing_count",
    "trigger",
    "overlap",
    "concurrency_key",
    "status",
    "reason",
    "requested_by",
    "args",
    "attempts",
    "interruptions",
    "lease_token",
    "claim_owner",
    "not_before",
    "error",
    "created_at",
    "updated_at",
    "finished_at",
    "cancel_requested_at",
    "cancel_reason",
)


def occurrence_fields(
    occurrence: Occurrence, runs: list[RunDetail] | None = None
) -> dict[str, Any]:
    """An occurrence with the documented field names (and its runs, when given)."""
    out = {name: _json(getattr(occurrence, name)) for name in OCCURRENCE_FIELDS}
    out["args"] = mask_args(occurrence.args)  # secret ones as *** (ADR 0031)
    if runs is not None:
        out["runs"] = [run_fields(run) for run in runs]
    return out


def action_fields(action: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded operator action (`actions`): `actor` as the CLI or console claimed it,
    `session_role` the database role that wrote it (None: recorded before revision 0038)."""
    return {k: _json(v) for k, v in action.items()}


def run_detail_fields(run: RunDetail) -> dict[str, Any]:
    """`runs show`: the run row's fields (`run_fields`) plus the lease columns and the output
    tail."""
    return run_fields(run) | {name: _json(getattr(run, name)) for name in RUN_DETAIL_FIELDS}


def run_output_fields(run: RunOutput) -> dict[str, Any]:
    """`runs logs --json`: the run's id, status, owner, result and output tail."""
    return {
        "id": run.id,
        "status": run.status,
        "instance_id": run.owner,
        "exit_code": run.exit_code,
        "http_status": run.http_status,
        "error": run.error,
        "error_summary": error_summary(run.status, run.exit_code, run.http_status, run.error),
        "output_tail": run.output_tail,
    }


def fire_time_fields(at: datetime, zone: str, start: datetime | None = None) -> dict[str, Any]:
    """`tasks next`: a fire time in the zone and in UTC, then its spread start (--spread)."""
    shown = {"local": iso(at.astimezone(ZoneInfo(zone))), "utc": iso(at)}
    if start is not None:
        shown |= {"start_local": iso(start.astimezone(ZoneInfo(zone))), "start_utc": iso(start)}
    return shown


def excluded_note(passed: int, calendars: Iterable[str]) -> str:
    """Why `tasks next` and the console's task page passed over firings: how many, and the
    calendars whose dates excluded them ("" when none were passed over)."""
    if not passed:
        return ""
    return (
        f"passed over {passed:,} excluded firing(s) on dates of calendar(s) "
        f"{', '.join(sorted(set(calendars)))}"
    )


def status_fields(status: dict[str, Any]) -> dict[str, Any]:
    """`status --json`: instances with drift and takeover bound, queue depth, budget use."""
    instances = []
    row: Instance
    states = []
    for row in status["instances"]:
        bound = takeover_bound(row.lease_ttl, row.lease_grace, row.reconcile_interval)
        state = instance_state(
            row.silent_for or timedelta(0),
            lease_ttl=row.lease_ttl,
            lease_grace=row.lease_grace,
            reconcile_interval=row.reconcile_interval,
            stopping=row.stopping,
        )
        states.append(state)
        instances.append(
            {
                "id": row.id,
                "state": state.value,
                "hostname": row.hostname,
                "pid": row.pid,
                "version": row.version,
                "schema_revision": row.schema_revision,
                "compatible": row.compatible,
                "slots": f"{row.slots_in_use}/{row.concurrency}",
                "slots_in_use": row.slots_in_use,
                "concurrency": row.concurrency,
                "clock_drift_seconds": seconds(row.clock_drift),
                "silent_for_seconds": rounded_seconds(row.silent_for),
                "takeover_bound_seconds": seconds(bound),
                "stopping": row.stopping,
                "started_at": iso(row.started_at),
                "heartbeat_at": iso(row.heartbeat_at),
            }
        )
    holders = [lock_holder_fields(h) for h in status.get("budget_lock_holders", [])]
    overdue = {k: _json(v) for k, v in status["overdue_tasks"].items()}
    partitions = {k: _json(v) for k, v in status.get("partitions", {}).items()}
    warnings = fleet_warnings(status["queue_depth"], overdue, states)
    ahead, kept_up = partitions.get("partitions_ahead"), partitions.get("last_success_at")
    if too_few_ahead(ahead) and (kept_up or partitions.get("last_error")):  # ADR 0033
        warnings.append(f"only {ahead} history partition(s) ahead: see partition upkeep")
    return {
        **status,
        "instances": instances,
        "live_instances": states.count(InstanceState.LIVE),
        "overdue_tasks": overdue,
        "partitions": partitions,
        "warnings": warnings,
        "parked_tasks": _tasks_at(status, "parked_tasks", "parked_at"),
        "pending_resumes": _tasks_at(status, "pending_resumes", "paused_until"),
        "budget_lock_holders": holders,
        "database": _database_fields(status.get("database", {})),
    }


def _database_fields(found: dict[str, Any]) -> dict[str, Any]:
    database = {k: _json(v) for k, v in found.items()}
    if database.get("system_identifier") is not None:
        database["system_identifier"] = str(database["system_identifier"])  # past 2^53
    return database


def _tasks_at(status: dict[str, Any], key: str, instant: str) -> list[dict[str, Any]]:
    """`status`'s task list `key` (parked, paused until an instant), its `instant` as ISO."""
    return [{**t, instant: iso(t[instant])} for t in status.get(key, [])]


def instances_table_rows(instances: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`status`'s instance table: the JSON objects with each `state` in words."""
    return [{**i, "state": InstanceState(i["state"]).text} for i in instances]


def database_text(database: dict[str, Any]) -> str:
    """`status`'s line for the database's epoch and replication (issue 32)."""
    if database.get("epoch_detection") != "available":
        return f"database epoch detection {database.get('epoch_detection')}"
    if database["in_recovery"]:
        where = "a standby (in recovery)"
    else:
        where = f"timeline {database['timeline']}"
    replication = "synchronous" if database["synchronous"] else "asynchronous or none"
    failover = database.get("last_failover_seen_at") or "none seen"
    return (
        f"database: system {database['system_identifier']}, {where}, replication "
        f"{replication}; last failover {failover}"
    )


def lock_holder_fields(holder: LockHolder) -> dict[str, Any]:
    """`status --json`'s `budget_lock_holders[]`: a session holding the budget's lock past a
    claim's moment (null: a column this role may not see, or a prepared transaction's pid)."""
    return {
        "pid": holder.pid,
        "role": holder.role,
        "application_name": holder.application_name,
        "state": holder.state,
        "transaction_started_at": iso(holder.transaction_started_at),
        "in_transaction_seconds": rounded_seconds(holder.in_transaction),
        "prepared": holder.prepared,
    }


def lock_holder_text(holder: dict[str, Any]) -> str:
    """`status`'s line for one of `budget_lock_holders`."""
    who = (
        f"pid {holder['pid']}" if holder["pid"] is not None else f"prepared {holder['prepared']!r}"
    )
    about = [f"role {holder['role'] or '?'}"]
    if holder["application_name"]:
        about.append(f"application {holder['application_name']!r}")
    if holder["state"]:
        about.append(holder["state"])
    if holder["in_transaction_seconds"] is not None:
        about.append(f"in transaction {holder['in_transaction_seconds']:.1f}s")
    return (
        f"budget lock held by {who} ({', '.join(about)}): no claim can start a job until it "
        "ends (docs/operations.md#the-budget-lock)"
    )


def _audit_value(value: Value) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, timedelta):
        return seconds(value)
    return list(value) if isinstance(value, tuple) else value


def audit_fields(report: AuditReport) -> dict[str, Any]:
    """`audit --json`: the window, the checks run, every violation with its rows, the notices."""
    window = report.window
    return {
        "ok": report.ok,
        "since": iso(window.since),
        "until": iso(window.until),
        "settle_seconds": seconds(window.settle),
        "checked": list(report.checked),
        "violations": [
            {
                "check": v.check,
                "message": v.message,
                "rows": {k: _audit_value(x) for k, x in v.rows.items()},
            }
            for v in report.violations
        ],
        "incomplete": [{"check": n.check, "message": n.message} for n in report.incomplete],
        "notices": [
            {
                "notice": n.name,
                "message": n.message,
                "rows": {k: _audit_value(x) for k, x in n.rows.items()},
            }
            for n in report.notices
        ],
    }


def audit_text(report: AuditReport) -> str:
    """One line per violation (`check: message`), the notes, the notices, then a summary line."""
    window = report.window
    lines = [f"{v.check}: {v.message}" for v in report.violations]
    lines += [f"not fully checked, {n.check}: {n.message}" for n in report.incomplete]
    lines += [f"notice, {n.name}: {n.message}" for n in report.notices]
    span = f"since {iso(window.since) or 'the beginning'} until {iso(window.until)}"
    verdict = f"{len(report.violations)} violation(s)" if report.violations else "no violations"
    lines.append(f"audit: {verdict} in {len(report.checked)} check(s), {span}")
    return "\n".join(lines)


def inside_lease_fields(row: dict[str, Any]) -> dict[str, Any]:
    """A run `recover` found still inside its lease (docs/cli.md, recover)."""
    return {
        "run_id": row["id"],
        "occurrence_id": row["occurrence_id"],
        "task_id": row["task_id"],
        "owner": row["owner"],
        "owner_renewing": row["renewing"],
        "lease_expires_at": iso(row["lease_expires_at"]),
        "takeover_at": iso(row["takeover_from"]),
    }


def health_fields(report: Report) -> dict[str, Any]:
    """A task's health as `tasks health` shows it (docs/cli.md, "Health object")."""
    counts, runs = report.counts, report.figures
    return {
        "task_id": report.task_id,
        "name": report.name,
        "verdict": str(report.health.verdict),
        "cause": report.health.cause,
        "window_seconds": report.window.total_seconds(),
        "expected_firings": report.expected,
        "owed_firings": report.owed,
        "owed_exact": report.owed_exact,
        "ran": counts.ran,
        "succeeded": counts.succeeded,
        "failed": counts.failed,
        "timed_out": counts.timed_out,
        "interrupted": counts.interrupted,
        "cancelled": counts.cancelled,
        "active": counts.active,
        "skipped": counts.skipped,
        "expired": counts.expired,
        "last_success_at": iso(counts.last_success_at),
        "last_failure_at": iso(counts.last_failure_at),
        "sampled_runs": runs.runs,
        "outlasting_runs": runs.outlasting,
        "queue_wait_p50_seconds": _rounded(runs.wait_p50),
        "queue_wait_p99_seconds": _rounded(runs.wait_p99),
        "run_time_p50_seconds": _rounded(runs.run_p50),
        "run_time_p99_seconds": _rounded(runs.run_p99),
        "next_run_at": iso(report.next_run_at),
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def notifications_text(notifications: dict[str, Any] | None) -> str | None:
    """`status`'s line on the notification outbox (None before revision 0025)."""
    if notifications is None:
        return None
    line = (
        f"notifications: {notifications['undelivered']} undelivered,"
        f" {notifications['failing']} failing"
    )
    oldest = notifications["oldest_undelivered_seconds"]
    return line if oldest is None else f"{line}, oldest {oldest:g} s"
