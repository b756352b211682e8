"""The fault soak: three real daemons and a few hundred tasks under injected faults, on a
streaming pair that switches over late in the run, judged by what the job processes really did
and by `scheduler-daemon audit` over the whole history.

The servers are a primary and an async standby (tests/ha/pair.py); the daemons, `recover` and
`audit` are given the pair's multi-host URL (`target_session_attrs=read-write`) and follow the
primary through it. The workload (tests/chaos/soak_workload.py) has its `forbid`, `queue` and
keyed jobs hold OS locks for their whole life and report a lock found taken to the overlap file:
two jobs that really ran at once, whatever the database recorded. The fault driver injects, at
random but seeded: more idle and slow-header connections than each daemon's HTTP endpoint
admits, SIGKILL (the daemon is restarted), SIGTERM and a restart (a rolling upgrade's drain: jobs
past the drain timeout are interrupted), SIGSTOP past the lease then SIGCONT,
`pg_terminate_backend` of a daemon's connections, one restart of the current primary, row locks
held on busy task rows (during completions, and during takeovers after a kill), cancels of
running jobs, and one daemon runs under libfaketime skew. Once, after two thirds of the fault
time, a planned switchover (tests/chaos/soak_switchover.py): the primary stopped cleanly, no
primary for TTL + grace + 2 s, the standby promoted; every daemon must run jobs again on the new
primary. At the end the faults stop, every takeover point passes, `recover` runs, and `audit`
must report nothing, the overlap file must be empty, and no run that was running at the stop may
have been taken over or ended by anyone but its owner.

Four tasks have notifications (tests/chaos/soak_notifications.py): they POST to a receiver in the
test that answers 500 to the first POST of a fifth of them; after the faults they are paused and
the outbox drained with the daemons running, and every (occurrence, event) they owe must have its
outbox row, every row must have arrived, and every POST must carry its row's one `delivery_id`.

A race that shows only on some seeds is still entered on every run: the soak counts each window
it drove and fails when one count is zero (an older keyed occurrence committing after a younger
one of its key started; a cancel while the job runs; a job interrupted by a drain; a completion and
a takeover deferred by a held row lock; a manual and a scheduled occurrence of one one-shot task;
runs whose leases passed while the switchover left no primary; an exit 8 and an exit 9; a stuck
in-process run taken over; an in-process stop ignored within the grace; a notification of each
event, and one delivered on a retry; an argument set seen again by a retry, on each executor;
excluded firings recorded, the task on another date run, a calendar change applied).

Three tasks, one per executor on the daemons' machine, are triggered with arguments
(`tasks trigger --arg/--args-json`) at seeded random times among the faults, and sometimes
without (tests/chaos/soak_args.py); each fails its occurrence's first attempt, so a retry runs.
Every attempt must have seen exactly its occurrence's recorded arguments (none for an occurrence
triggered without, or fired by its schedule), and the arguments recorded must be the ones sent.

Three tasks exclude calendars (tests/chaos/soak_calendars.py): one every second in a zone whose
date over the whole soak a calendar holds (every firing excluded), one reading the same calendar
in a zone on another date (it runs), and one whose calendar is rewritten once among the faults
(`calendars add --replace`) to hold its date. No firing may be queued on a date excluded by the
calendar version in force when it was dispatched, every firing of the first is covered by its
`excluded` rows, and the others ran.

In-process tasks run beside the process jobs (issue 33; tests/chaos/soak_jobs.py): their daemons
may exit 8 (a job ignored its stop past the 1.5 s grace) or 9 (a job still ran at its trust
deadline: a freeze, an outage, the switchover's gap), and the fleet's supervisor
(tests/chaos/soak_fleet.py) restarts them as systemd would and counts those exits; their job log
is judged by tests/chaos/soak_inprocess.py (overlaps, keys, tokens). Any other exit fails the
soak: every daemon must still be running, or restarted, at the end and exit 0 on SIGTERM (8 with
a stuck job): failing, crashing and timed out jobs, and jobs printing NUL bytes or megabytes,
never take one down.

`pytest tests/chaos/test_soak.py -s --soak-seed N --soak-seconds S` for a chosen or a long run;
it needs server binaries with pg_basebackup (skipped without them, failed under CI=true).
"""

import random
import signal
import socket
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from scheduler_daemon.runtime.endpoint import MAX_CONNECTIONS, READ_TIMEOUT_SECONDS
from scheduler_daemon.runtime.supervision import EXIT_IN_PROCESS_STUCK, EXIT_IN_PROCESS_UNTRUSTED
from tests.chaos import soak_args, soak_calendars, soak_jobs, soak_notifications
from tests.chaos.soak_fleet import DAEMONS, SUPERVISED, Fleet
from tests.chaos.soak_inprocess import Verdict
from tests.chaos.soak_switchover import Switchover
from tests.chaos.soak_workload import Workload
from tests.ha.pair import ReplicationPair, running_pair
from tests.support import NotificationReceiver, http_get, query, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TTL, GRACE, RECONCILE = 3.0, 1.0, 1.0  # tests.support.FAST
BOUND = TTL + GRACE + RECONCILE  # the takeover bound of FAST daemons
BUDGET = 16


class Held:
    """Row locks on task rows, held by a transaction of the test's own."""

    def __init__(self, url: str, task_ids: list[int]) -> None:
        self.conn = psycopg.connect(url)
        self.conn.execute(
            "SELECT id FROM task WHERE id = ANY(%s) ORDER BY id FOR UPDATE", (task_ids,)
        )

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


class Driver:
    def __init__(
        self,
        pair: ReplicationPair,
        *,
        fleet: Fleet,
        work: Workload,
        cli: Any,
        rng: random.Random,
        calendars: soak_calendars.Plan,
    ) -> None:
        self.url, self.fleet, self.work, self.pair, self.cli = pair.url(), fleet, work, pair, cli
        self.rng, self.calendars = rng, calendars
        self.triggers = soak_args.Triggers(work.args_tasks, rng)  # an operator's, with arguments
        self.switchover = Switchover(
            pair,
            self.url,
            lambda: set(fleet.ids.values()),
            exited=fleet.exited,
            spare=self.spare_owner,
        )
        self.switched_at: float | None = None  # when it began, as a share of the fault time
        self.injected = Counter[str]()
        self.cancels_while_running = 0
        self.takeover_findings: list[dict[str, Any]] = []
        self.audit_errors: list[str] = []  # mid-soak audits the database could not answer
        self.healthz_while_held = 0  # /healthz answered while idle connections filled the cap
        self.endpoint_failures: list[str] = []
        self.kills: list[tuple[str, datetime]] = []
        self.held_tasks: set[int] = set()  # their takeovers wait for the test, not the fleet
        # The server restarts' start times: after the switchover, pg_postmaster_start_time() is
        # the new primary's (the standby's start), no longer the restarted primary's.
        self.restarts: list[datetime] = []

    def spare_owner(self) -> bool:
        """Whether some live daemon runs jobs, none of them in-process and longer than a lease
        (such a job would outlive its trust deadline in the switchover's gap: exit 9)."""
        long = {n for n, spec in self.work.in_process.items() if spec["seconds"] > TTL}
        running = self.running()
        owners = {r["owner"] for r in running} & set(self.fleet.ids.values())
        return bool(owners - {r["owner"] for r in running if r["name"] in long})

    def hold(self, task_ids: list[int]) -> Held:
        self.held_tasks.update(task_ids)
        return Held(self.url, task_ids)

    def now(self) -> datetime:
        return query(self.url, "SELECT now() AS t")[0]["t"]

    def running(self, instance_id: str | None = None) -> list[dict[str, Any]]:
        return query(
            self.url,
            """SELECT r.id AS run_id, o.id AS occurrence_id, o.task_id, t.name, r.owner,
                      extract(epoch FROM now() - r.started_at)::float AS age
               FROM run r JOIN occurrence o ON o.id = r.occurrence_id
               JOIN task t ON t.id = o.task_id
               WHERE r.status = 'running' AND (%s::text IS NULL OR r.owner = %s)""",
            (instance_id, instance_id),
        )

    def kill(self) -> None:
        i = self.rng.randrange(DAEMONS)
        self.kills.append((self.fleet.ids[i], self.now()))
        self.fleet.kill(i)
        time.sleep(self.rng.uniform(0.5, 2))
        self.fleet.start(i)

    def kill_and_hold(self) -> None:
        """A kill, then the dead owner's busiest task rows held past the takeover point: the
        takeover of those runs waits (and is retried), the rest are taken over on time."""
        i = self.rng.randrange(DAEMONS)
        victim = self.fleet.ids[i]
        wait_for(lambda: self.running(victim), timeout=15, message=f"{victim} to run something")
        self.kills.append((victim, self.now()))
        self.fleet.kill(i)
        held = sorted({r["task_id"] for r in self.running(victim)})[:3]
        lock = self.hold(held)
        try:
            time.sleep(BOUND + 2)  # the takeover point passes while the rows are held
            self.fleet.start(i)
        finally:
            lock.release()

    def rolling_restart(self) -> None:
        """SIGTERM, as a rolling upgrade does: jobs past the drain timeout are interrupted and
        must be gone before their retry starts elsewhere; the daemon exits 0 and comes back."""

        # A daemon whose long job (4-7 s) started under 1.5 s ago: it still runs when the 2 s
        # drain times out, so the drain interrupts it.
        def fresh_long() -> list[dict[str, Any]]:
            return [
                r
                for r in self.running()
                if r["name"].startswith("long-") and r["age"] < 1.5 and r["owner"] in owners
            ]

        owners = set(self.fleet.ids.values())
        try:
            (run, *_) = wait_for(fresh_long, timeout=15, interval=0.3, message="a long job")
            i = next(i for i in range(DAEMONS) if self.fleet.ids[i] == run["owner"])
        except AssertionError:
            i = self.rng.randrange(DAEMONS)
        code = self.fleet.stop(i, at="a rolling restart")
        assert code in (0, *SUPERVISED), self.fleet.procs[i].log()[-3000:]
        self.fleet.start(i)

    def hold_idle_connections(self) -> None:
        """More idle and slow-header connections than the endpoint's cap on every daemon, held
        past its read timeout: /healthz must still answer on each (issue 28: 30 idle
        connections once stopped jobs from starting and shutdown from draining)."""
        held: list[socket.socket] = []
        try:
            for i, port in self.fleet.ports.items():
                proc = self.fleet.up(i)
                if proc is None:  # restarting after an exit 8 or 9: nothing listens there now
                    continue
                try:
                    for n in range(MAX_CONNECTIONS + 8):
                        conn = socket.create_connection(("127.0.0.1", port), timeout=2)
                        if n % 4 == 0:  # a slow header that never ends
                            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: soak\r\n")
                        held.append(conn)
                    status = http_get(port, "/healthz")
                except OSError as exc:
                    status = (0, f"holding connections: {exc}")
                if status == (200, "ok\n"):
                    self.healthz_while_held += 1
                elif proc.proc.poll() is None:  # not one that exited meanwhile
                    self.endpoint_failures.append(f"d{i} /healthz while held: {status}")
            time.sleep(READ_TIMEOUT_SECONDS + 1)  # every held one is closed by the timeout
        finally:
            for conn in held:
                conn.close()

    def freeze(self) -> None:
        """SIGSTOP past the lease, grace and a reconcile. Every other time, the owner of a long
        in-process job that started under 1.5 s ago (8 s or more left): it still runs at the
        thaw, past its trust deadline, and its daemon must exit 9 before its takeover point."""
        i = self.rng.randrange(DAEMONS)
        if self.rng.random() < 0.5:
            ids = dict(self.fleet.ids)
            fresh = [
                r
                for r in self.running()
                if r["name"].startswith("ip-long-")
                and r["age"] < 1.5
                and r["owner"] in ids.values()
            ]
            if fresh:
                i = next(i for i, owner in ids.items() if owner == fresh[0]["owner"])
        self.fleet.freeze(i, BOUND + self.rng.uniform(0.5, 2))

    def terminate_backends(self) -> None:
        i = self.rng.randrange(DAEMONS)
        query(
            self.url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (f"scheduler-daemon {self.fleet.ids[i]}",),
        )

    def hold_busy_rows(self) -> None:
        """Task rows of running short jobs held for a few seconds: their completions wait.
        Since 0021 a success of a recurring task locks no task row, so the rows of jobs that end
        otherwise (failing, timed out, poison) or of one-shots come first."""
        running = self.running()
        busy = sorted({r["task_id"] for r in running})
        if not busy:
            return
        locking = sorted(
            {r["task_id"] for r in running if r["name"].startswith(LOCKING_COMPLETIONS)}
        )
        picked = self.rng.sample(locking, min(3, len(locking)))
        others = sorted(set(busy) - set(picked))
        picked += self.rng.sample(others, min(4 - len(picked), len(others)))
        lock = self.hold(sorted(picked))
        time.sleep(self.rng.uniform(2.5, 4))
        lock.release()

    def hold_keyed_row(self) -> None:
        """One every-second keyed task's row held: its firings commit late, as catch-up, older
        than the occurrences of its key that ran meanwhile."""
        key = self.rng.choice(sorted(self.work.keys))
        name = self.rng.choice(self.work.keys[key])
        (task,) = query(self.url, "SELECT id FROM task WHERE name = %s", (name,))
        lock = self.hold([task["id"]])
        time.sleep(self.rng.uniform(4, 6))
        lock.release()

    def cancel(self) -> None:
        candidates = [
            r
            for r in self.running()
            if r["name"].startswith(
                ("long-", "forbid-", "keyed-", "timeout-", "ip-long-", "ip-sync-", "ip-async-")
            )
        ]
        if not candidates:
            return
        pick = self.rng.choice(candidates)
        result = self.cli("runs", "cancel", str(pick["run_id"]), url=self.url)
        if result.code == 0 and "cancel requested" in result.out:
            self.cancels_while_running += 1

    def restart_server(self) -> None:
        self.pair.primary.restart()  # the current primary: the standby reconnects to it
        self.restarts.append(query(self.url, "SELECT pg_postmaster_start_time() AS t")[0]["t"])

    def check_takeovers(self) -> None:
        """Mid-soak, while live daemons exist: nothing is past its takeover point for long."""
        result = self.cli("audit", "--check", "takeover_overdue", "--json", url=self.url)
        if result.code not in (0, 1) or not result.out.strip():
            # The database is restarting: an unreachable database exits 1 with one line.
            self.audit_errors.append(result.err.strip())
            return
        self.takeover_findings += result.json()["violations"]

    def windows(self) -> dict[str, int]:
        """How often the soak entered each race window it drives, so far."""
        counts = {name: query(self.url, sql)[0]["n"] for name, sql in WINDOWS.items()}
        events = self.fleet.logs()
        counts["cancel_while_running"] = self.cancels_while_running
        counts["healthz_while_connections_held"] = self.healthz_while_held
        counts["completion_deferred_by_row_lock"] = sum(
            e.get("event") == "outcome_deferred" for e in events
        )
        counts["takeover_deferred_by_row_lock"] = sum(
            e.get("event") == "reconcile_unit_failed" and e.get("category") == "taken_over"
            for e in events
        )
        counts["switchover_past_leases"] = self.switchover.leases_passed
        counts["args_seen_on_a_retry"] = self.args_verdict().window()
        counts.update(self.calendar_verdict().windows())
        codes = self.fleet.exit_codes()
        counts["in_process_exit_8"] = codes.get(EXIT_IN_PROCESS_STUCK, 0)
        counts["in_process_exit_9"] = codes.get(EXIT_IN_PROCESS_UNTRUSTED, 0)
        return counts

    def args_verdict(self) -> soak_args.Verdict:
        return soak_args.judge(self.url, self.work.args, self.triggers)

    def calendar_verdict(self, stopped: datetime | None = None) -> soak_calendars.Verdict:
        return soak_calendars.judge(self.url, self.calendars, stopped or self.now())

    def change_calendar(self) -> None:
        """Not a fault: an operator's calendar change (`calendars add --replace`), once."""
        self.calendars.change(self.cli, self.url)

    def trigger_args(self) -> None:
        """Not a fault: an operator's manual triggers, with arguments or without."""
        self.triggers.fire(self.cli, self.url)

    def missed(self) -> list[str]:
        """The faults that drive the race windows not entered so far; not `trigger_args` while
        an occurrence it triggered with arguments still waits for its retry (it would crowd
        out the faults)."""
        missed = {DRIVES[w] for w, n in self.windows().items() if not n and w in DRIVES}
        if self.triggers.waiting(self.url):
            missed.discard("trigger_args")
        return sorted(missed)

    def run(self, seconds: float) -> None:
        faults = {
            "kill": self.kill,
            "kill_and_hold": self.kill_and_hold,
            "freeze": self.freeze,
            "rolling_restart": self.rolling_restart,
            "terminate_backends": self.terminate_backends,
            "hold_busy_rows": self.hold_busy_rows,
            "hold_keyed_row": self.hold_keyed_row,
            "cancel": self.cancel,
            "hold_idle_connections": self.hold_idle_connections,
            "trigger_args": self.trigger_args,
        }
        # Each kind at least once (the manual triggers with arguments four times: each is quick),
        # the server restart exactly once (early: before the switchover even on a loaded
        # machine), then at random.
        plan = [*faults, "hold_keyed_row", "cancel", "hold_busy_rows", *["trigger_args"] * 3]
        self.rng.shuffle(plan)
        plan.insert(self.rng.randrange(2, 6), "restart_server")
        plan.insert(self.rng.randrange(1, 6), "change_calendar")
        faults["restart_server"] = self.restart_server
        faults["change_calendar"] = self.change_calendar
        faults["switchover"] = self.switchover.run
        began = time.monotonic()
        deadline = began + seconds
        while time.monotonic() < deadline:
            elapsed = time.monotonic() - began
            # Once the plan is done, or the switchover has taken its share of the time, the
            # faults behind race windows not yet entered come first.
            missed = self.missed() if self.switched_at is not None or not plan else []
            if self.switched_at is None and elapsed >= seconds * 2 / 3:
                # Once, late: after two thirds of the fault time, before the faults stop.
                kind, self.switched_at = "switchover", elapsed / seconds
            elif missed:
                kind = self.rng.choice(missed)
            elif plan:
                kind = plan.pop(0)
            else:
                kind = self.rng.choice(sorted(set(faults) - ONCE))
            time.sleep(self.rng.uniform(0.5, 2.5))
            faults[kind]()
            self.injected[kind] += 1
            if kind not in ("hold_busy_rows", "kill_and_hold", "restart_server"):
                self.check_takeovers()


WINDOWS = {
    # An older keyed occurrence committed after a younger one of its key had started.
    "late_older_keyed": """
        SELECT count(*) AS n FROM occurrence x
        JOIN occurrence y ON y.concurrency_key = x.concurrency_key
            AND (x.scheduled_for, x.id) < (y.scheduled_for, y.id)
        JOIN run fy ON fy.occurrence_id = y.id AND fy.attempt = 1
        WHERE x.created_at > fy.started_at""",
    # A job still running when its daemon drained past the drain timeout (SIGTERM).
    "interrupted_by_drain": """
        SELECT count(*) AS n FROM run WHERE status = 'interrupted' AND finished_by = owner""",
    # Runs of the poison tasks recorded with what they printed mended (U+FFFD for NUL).
    "poison_output_recorded": """
        SELECT count(*) AS n FROM run r JOIN occurrence o ON o.id = r.occurrence_id
        JOIN task t ON t.id = o.task_id
        WHERE t.name LIKE 'poison-%' AND r.status IN ('success', 'failed')
          AND (r.output_tail LIKE '%\ufffd%' OR r.error LIKE '%\ufffd%')""",
    # A manual and a scheduled occurrence of one one-shot task.
    "one_shot_manual_and_scheduled": """
        SELECT count(*) AS n FROM task t WHERE t.schedule_kind = 'once'
          AND EXISTS (SELECT FROM occurrence m WHERE m.task_id = t.id AND m.trigger = 'manual')
          AND EXISTS (SELECT FROM occurrence s WHERE s.task_id = t.id
                      AND s.trigger = 'schedule')""",
    # A run whose in-process job ignored its stop past the grace (its daemon exited 8), taken
    # over by a peer at its takeover point.
    "in_process_stuck_taken_over": """
        SELECT count(*) AS n FROM run r JOIN occurrence o ON o.id = r.occurrence_id
        JOIN task t ON t.id = o.task_id
        WHERE t.name = 'ip-stubborn' AND r.status = 'interrupted' AND r.finished_by <> r.owner""",
    # A coroutine that swallowed its cancellation and returned within the grace: `timeout`.
    "in_process_stop_ignored_within_grace": """
        SELECT count(*) AS n FROM run r JOIN occurrence o ON o.id = r.occurrence_id
        JOIN task t ON t.id = o.task_id
        WHERE t.name = 'ip-stubborn-async' AND r.status = 'timeout'""",
    # Notifications of every event the tasks with notifications select (the fewest of them).
    "notified_every_event": """
        SELECT min(n) AS n FROM (
            SELECT (SELECT count(*) FROM notification_outbox WHERE event = e) AS n
            FROM unnest(ARRAY['failure', 'timeout', 'skipped', 'expired', 'deadline']) e) s""",
    # Runs of spread tasks started at a spread offset (audit `started_before_spread` holds each
    # to its start; this says the soak produced some).
    "spread_started": """
        SELECT count(*) AS n FROM run r JOIN occurrence o ON o.id = r.occurrence_id
        WHERE o.spread_offset > interval '0'
          AND r.started_at >= o.scheduled_for + o.spread_offset""",
    # A firing of a replace task that stopped its running predecessor (reason `replaced`).
    "replaced_a_running_job": """
        SELECT count(*) AS n FROM occurrence o JOIN task t ON t.id = o.task_id
        WHERE t.overlap = 'replace' AND o.status = 'cancelled' AND o.reason = 'replaced'
          AND EXISTS (SELECT FROM run r WHERE r.occurrence_id = o.id)""",
    # A retry whose delay was drawn under --backoff-max: below its ceiling, recorded.
    "retry_delay_drawn": """
        SELECT count(*) AS n FROM occurrence o JOIN task t ON t.id = o.task_id
        WHERE t.backoff_max IS NOT NULL AND o.retry_delay IS NOT NULL
          AND o.retry_delay <= t.backoff_max""",
    # A notification delivered after a failed POST (the receiver's 500) or a lost record.
    "notification_delivered_on_a_retry": """
        SELECT count(*) AS n FROM notification_outbox
        WHERE delivered_at IS NOT NULL AND attempts > 1""",
}


# Tasks whose completions lock their task row: not a recurring task's success (0021).
LOCKING_COMPLETIONS = ("failing-", "timeout-", "once-", "poison-", "ip-stubborn")

ONCE = {"restart_server", "switchover", "change_calendar"}  # faults injected exactly once

# The fault that drives each window, chosen again while its window has not been entered.
DRIVES = {
    "late_older_keyed": "hold_keyed_row",
    "interrupted_by_drain": "rolling_restart",
    "cancel_while_running": "cancel",
    "healthz_while_connections_held": "hold_idle_connections",
    "completion_deferred_by_row_lock": "hold_busy_rows",
    "takeover_deferred_by_row_lock": "kill_and_hold",
    "in_process_exit_9": "freeze",
    "args_seen_on_a_retry": "trigger_args",
}


def _figures(url: str, events: list[dict[str, Any]], driver: Driver) -> dict[str, Any]:
    (row,) = query(
        url,
        """SELECT (SELECT count(*) FROM occurrence) AS occurrences,
                  (SELECT count(*) FROM run) AS runs,
                  (SELECT count(*) FROM run WHERE attempt > 1) AS retries,
                  (SELECT count(*) FROM run WHERE status = 'cancelled') AS cancelled_runs,
                  (SELECT count(*) FROM occurrence WHERE status = 'skipped') AS skipped,
                  lag.*
           FROM (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY l) AS p50_start_lag,
                        percentile_cont(0.99) WITHIN GROUP (ORDER BY l) AS p99_start_lag,
                        max(l) AS max_start_lag
                 FROM (SELECT extract(epoch FROM r.started_at - o.scheduled_for) AS l
                       FROM run r JOIN occurrence o ON o.id = r.occurrence_id
                       WHERE r.attempt = 1 AND o.trigger = 'schedule') s) lag""",
    )
    by_kind = query(
        url,
        """SELECT split_part(t.name, '-', 1) AS kind,
                  round(max(extract(epoch FROM r.started_at - o.scheduled_for)), 1) AS lag
           FROM run r JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id
           WHERE r.attempt = 1 AND o.trigger = 'schedule' GROUP BY 1 ORDER BY 1""",
    )
    taken = [e for e in events if e.get("event") == "run_taken_over"]
    # A takeover waits out the quiet period of the database's latest change of life before it:
    # a server restart (its start time) or the switchover (the fleet's first sighting of the
    # new epoch, recorded in fleet_epoch).
    delays = query(
        url,
        """WITH life AS (
               SELECT unnest(%s::timestamptz[]) AS at
               UNION SELECT first_seen_at FROM fleet_epoch
               WHERE first_seen_at > (SELECT min(first_seen_at) FROM fleet_epoch))
           SELECT r.finished_at - (r.lease_expires_at - %s * interval '1 second') AS since_renewal,
                  r.finished_at - greatest(r.takeover_at,
                      (SELECT max(at) FROM life WHERE at <= r.finished_at)
                      + %s * interval '1 second') AS past_point
           FROM run r JOIN occurrence o ON o.id = r.occurrence_id
           WHERE r.id = ANY(%s) AND NOT o.task_id = ANY(%s)""",
        (
            driver.restarts,
            TTL,
            TTL + GRACE,
            [e["run_id"] for e in taken],
            sorted(driver.held_tasks),
        ),
    )
    fenced = sum(
        e.get("event") in ("run_fenced", "renewal_fenced") or "fenced" in str(e.get("result", ""))
        for e in events
    )
    return {
        **row,
        "max_start_lag_by_kind": {k["kind"]: float(k["lag"]) for k in by_kind},
        "takeovers": len(taken),
        "kills": len(driver.kills),
        "fenced_writes": fenced,
        # Over the takeovers of rows the test did not hold (those wait for the test); "past its
        # point" counts from the end of a restart's or the switchover's quiet period when that is
        # later (guarantee 11).
        "max_takeover_since_last_renewal": max((d["since_renewal"] for d in delays), default=None),
        "max_takeover_past_its_point": max((d["past_point"] for d in delays), default=None),
    }


@pytest.fixture
def pair() -> Iterator[ReplicationPair]:
    """The soak's servers: a migrated primary and an async standby streaming from it
    (tests/ha/pair.py), stopped and removed however the soak ends."""
    yield from running_pair()


@pytest.fixture
def receiver(soak) -> Iterator[NotificationReceiver]:
    """The notify URL of the soak's tasks with notifications, for the whole soak: it answers 500
    to the first POST of a fifth of the notifications (seeded), so retries happen."""
    receiver = NotificationReceiver(flaky=0.2, seed=soak.seed)
    try:
        yield receiver
    finally:
        receiver.close()


def test_the_fleet_keeps_every_guarantee_under_faults_by_the_jobs_and_the_audit(
    pair, cli, capsys, tmp_path, soak, *, receiver
) -> None:
    rng = random.Random(soak.seed)
    began = time.monotonic()
    with capsys.disabled():  # the cli fixture reads what is captured; the seed must show
        print(
            f"\nsoak seed {soak.seed}, {soak.seconds:.0f} s of faults"
            f" (rerun: pytest {__file__} -s --soak-seed {soak.seed})"
        )
    url = pair.url()  # every daemon, `recover` and `audit` follow the primary through it
    work = Workload(tmp_path, rng)
    (start,) = query(url, "SELECT now() AS t")
    work.build(soak.seconds, start["t"] + timedelta(seconds=10), receiver.url)
    calendars = soak_calendars.Plan.pick(start["t"], soak.seconds, random.Random(soak.seed))
    calendars.build(work)
    calendars.create(cli, url)
    for name, argv in work.specs.items():
        added = cli("tasks", "add", name, *argv, url=url)
        assert added.code == 0, (name, added.err)
    assert cli("config", "set", "max-concurrent-runs", str(BUDGET), url=url).code == 0
    for i in range(0, 30, 2):  # manual occurrences of one-shots that will also fire on schedule
        assert cli("tasks", "trigger", f"once-{i}", url=url).code == 0
    calendars.record_first(url)

    fleet = Fleet(url, tmp_path, work.joblog.parent)
    driver = Driver(pair, fleet=fleet, work=work, cli=cli, rng=rng, calendars=calendars)
    try:
        for i in range(DAEMONS):
            fleet.start(i)
        fleet.supervise()  # restarts a daemon that exits 8 or 9, as systemd would
        driver.run(soak.seconds)
        # Faults stop; live daemons take over everything left behind by the last fault.
        for proc in fleet.procs.values():
            proc.signal(signal.SIGCONT)
        time.sleep(BOUND + 3)
        driver.check_takeovers()
        # The tasks with notifications paused, the daemons deliver what they owe.
        drained = soak_notifications.drain(url, cli, work.notify)
        fleet.halt()
        (stopped,) = query(url, "SELECT now() AS t")
        for i in range(DAEMONS):
            code = fleet.stop(i, at="the end")
            assert code in (0, *SUPERVISED), fleet.procs[i].log()[-3000:]
    finally:
        fleet.halt()
        for proc in fleet.all:
            proc.kill()
    time.sleep(TTL + GRACE + 1)  # runs of killed processes pass their takeover point
    recovered = cli("recover", "--lease-ttl", "3s", "--lease-grace", "1s", url=url)
    assert recovered.code == 0, recovered.err

    audit = cli("audit", "--until", stopped["t"].isoformat(), "--settle", "5s", "--json", url=url)
    assert audit.code in (0, 1), audit.err
    verdict = audit.json()
    events = fleet.logs()
    windows = driver.windows()
    excluded = driver.calendar_verdict(stopped["t"])
    overlaps = work.overlaps.read_text().splitlines()
    switched = driver.switchover.problems(events)
    in_process = Verdict(work.joblog)
    unlogged = _unlogged_successes(url, in_process)
    notified = soak_notifications.Verdict(url, work.notify, receiver.received)
    argued = driver.args_verdict()
    with capsys.disabled():
        _report(driver, windows, _figures(url, events, driver), verdict, overlaps)
        print(
            f"switchover at {driver.switched_at or 0:.2f} of the fault time:"
            f" {driver.switchover.figures()}; problems {switched[:20]}"
        )
        _report_in_process(url, fleet, in_process, unlogged)
        print(f"notifications: {notified.figures()}; drain {drained}")
        for line in notified.problems[:20]:
            print("  ", line)
        print(f"arguments: {argued.figures(driver.triggers)}")
        for line in argued.problems[:20]:
            print("  ", line[:500])
        print(f"calendars: {excluded.figures()}")
        for line in excluded.problems[:20]:
            print("  ", line[:500])
        print(f"wall time {time.monotonic() - began:.0f} s")

    assert overlaps == [], "jobs that must exclude each other really ran at once"
    assert verdict["violations"] == [], audit.out[-5000:]
    assert audit.code == 0
    assert verdict["incomplete"] == []
    assert driver.takeover_findings == []
    assert driver.endpoint_failures == []
    assert switched == [], "the switchover took runs from live owners"
    assert fleet.unexpected == [], "a daemon exited with a code no supervisor expects"
    assert in_process.overlaps == [], "in-process jobs that must exclude each other ran at once"
    assert in_process.problems == [], "idempotency keys or tokens went wrong"
    assert unlogged == [], "runs recorded `success` whose in-process job never ran to its end"
    assert in_process.sources() == {str(Path(soak_jobs.__file__).resolve())}
    assert notified.problems == [], "notifications owed, lost, or sent with the wrong id"
    assert argued.problems == [], "a job saw other arguments than its occurrence's, or sent ones"
    assert excluded.problems == [], "an excluded firing was queued, or one not recorded excluded"
    missed = [name for name, count in windows.items() if count == 0]
    assert not missed, f"the soak never entered {missed} (seed {soak.seed})"


def _unlogged_successes(url: str, in_process: Verdict) -> list[int]:
    """In-process runs the database holds as `success` whose job log lacks their start or end."""
    rows = query(
        url,
        """SELECT r.id FROM run r JOIN occurrence o ON o.id = r.occurrence_id
           JOIN task t ON t.id = o.task_id WHERE t.in_process AND r.status = 'success'""",
    )
    return [
        r["id"] for r in rows if r["id"] not in in_process.starts or r["id"] not in in_process.ends
    ]


def _report_in_process(url: str, fleet: Fleet, in_process: Verdict, unlogged: list[int]) -> None:
    runs = query(
        url,
        """SELECT r.status, count(*) AS n FROM run r JOIN occurrence o ON o.id = r.occurrence_id
           JOIN task t ON t.id = o.task_id WHERE t.in_process GROUP BY 1 ORDER BY 1""",
    )
    print(
        f"in-process: runs { ({r['status']: r['n'] for r in runs}) }; job log"
        f" {in_process.figures()}; exits by code {fleet.exit_codes()}"
        f"; unexpected exits {len(fleet.unexpected)}; successes without their job's end {unlogged}"
    )
    for exit_ in fleet.exits:
        print("   exit", exit_)
    for line in (in_process.overlaps + in_process.problems + fleet.unexpected)[:20]:
        print("  ", line[:3000])


def _report(driver, windows, figures, verdict, overlaps) -> None:
    print(f"injected: {dict(driver.injected)}; endpoint failures {driver.endpoint_failures}")
    print(f"windows entered: {windows}")
    print(f"figures: {figures}")
    print(
        f"audit: {len(verdict['violations'])} violation(s), incomplete {verdict['incomplete']}"
        f"; mid-soak takeover findings {len(driver.takeover_findings)}"
        f"; mid-soak audits not answered {driver.audit_errors[:5]}"
    )
    print(f"real-process overlaps: {len(overlaps)}")
    for line in overlaps[:20]:
        print("  ", line)
    for violation in verdict["violations"][:20]:
        print("  ", violation["check"], violation["message"])
