"""The soak's tasks with exclusion calendars (issue 38 item 2, guarantee 20) and the verdict on
what their firings became.

Two zones are picked when the soak starts (`Plan`), each with one local date over the whole soak
(from two minutes before its start to well past its end: no midnight in either), the two dates
different. Calendar `soak-here` holds the first zone's date; `soak-later` holds a date ten days
after the second zone's:
- `cal-held`, every second in the first zone, excludes `soak-here`: every firing of the soak is
  on an excluded date (one `skipped`/`excluded` row, extended by each pass as they fall due);
- `cal-free`, every 2 s in the second zone, excludes the same `soak-here`: the same dates, read in
  its own zone, exclude none of its firings, so it runs;
- `cal-changed`, every 2 s in the second zone, excludes `soak-later`, which holds no date of the
  soak until the fault driver's `change_calendar` (once, early) rewrites it (`calendars add
  soak-later --replace`) to hold the second zone's date too: from the next dispatch, its
  firings are excluded.

`Verdict` judges every occurrence of those tasks, by the calendar version in force when it was
dispatched (its `created_at`, the dispatch transaction's clock, against the database clock read
before the change's first CLI call and after its successful one; between the two, either):
- no occurrence that was queued (ran or was to run) has a nominal time on a date excluded in its
  task's zone by a version already in force; no `excluded` row covers a date no version in force
  held;
- every firing of `cal-held` from its first to the stop (less SETTLE, as `audit --settle`: the
  daemons still run then, a pass behind) is covered by its `excluded` rows
  (`scheduled_for`..`last_scheduled_for`, one a second, `firing_count` each), and it has no
  other row; `cal-free` ran; `cal-changed` ran before the change and is `excluded` from its first
  firing after it to the stop (less SETTLE), nothing else after it.
Its windows: `excluded_firings_recorded` (the firings of `cal-held` its rows cover up to the stop),
`calendar_other_zone_ran` (runs of `cal-free`) and `calendar_change_applied` (1 when `cal-changed`
ran before the change and has an `excluded` row dispatched after it).
"""

import random
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from tests.support import query

# Firings this close to the stop may not be recorded yet (the daemons still run, a pass behind),
# as the soak's `audit --settle 5s` allows.
SETTLE = timedelta(seconds=5)

# Zones from UTC-12 to UTC+14: at any instant two of them hold different local dates, and at most
# a few are near their midnight.
ZONES = (
    "Etc/GMT+12",
    "America/Los_Angeles",
    "America/New_York",
    "UTC",
    "Europe/Berlin",
    "Asia/Kolkata",
    "Asia/Tokyo",
    "Pacific/Kiritimati",
)
HERE, LATER = "soak-here", "soak-later"
HELD, FREE, CHANGED = "cal-held", "cal-free", "cal-changed"
TASKS = (HELD, FREE, CHANGED)
SECOND = timedelta(seconds=1)

OCCURRENCES = """
    SELECT t.name AS task, t.timezone, o.id, o.scheduled_for, o.last_scheduled_for,
           o.firing_count, o.status, o.reason, o.trigger, o.created_at,
           (SELECT count(*) FROM run r WHERE r.occurrence_id = o.id) AS runs
    FROM occurrence o JOIN task t ON t.id = o.task_id
    WHERE t.name = ANY(%s) ORDER BY t.name, o.scheduled_for, o.id"""


def local_date(at: datetime, zone: str) -> date:
    return at.astimezone(ZoneInfo(zone)).date()


@dataclass
class Plan:
    """The zones, calendars and tasks of one soak, and the change the driver makes."""

    held_zone: str
    free_zone: str
    here: date  # the held zone's date over the soak
    there: date  # the free zone's date over the soak
    first_firing: datetime | None = None  # cal-held's, read before any daemon starts
    # The database clock before the change's first call and after its successful one.
    change_before: datetime | None = None
    change_after: datetime | None = None
    change_failures: list[str] = field(default_factory=list)

    @classmethod
    def pick(cls, start: datetime, seconds: float, rng: random.Random) -> "Plan":
        """Two zones each on one local date from `start` - 2 min to well past the soak's end
        (its faults, the drains and the verdict), the dates different."""
        low, high = start - timedelta(minutes=2), start + timedelta(seconds=3 * seconds + 900)
        steady = {z: local_date(low, z) for z in ZONES if local_date(low, z) == local_date(high, z)}
        pairs = [(a, b) for a in sorted(steady) for b in sorted(steady) if steady[a] != steady[b]]
        assert pairs, f"no two zones on steady, different dates from {low} to {high}"
        held, free = rng.choice(pairs)
        return cls(held, free, steady[held], steady[free])

    @property
    def calendars(self) -> dict[str, list[date]]:
        return {HERE: [self.here], LATER: [self.there + 10 * timedelta(days=1)]}

    def changed_dates(self) -> list[date]:
        return [*self.calendars[LATER], self.there]

    def create(self, cli: Any, url: str) -> None:
        for name, days in self.calendars.items():
            added = cli("calendars", "add", name, *_dates(days), url=url)
            assert added.code == 0, (name, added.err)

    def build(self, work: Any) -> None:
        """The three tasks, as the workload's jobs (tests/chaos/soak_workload.py)."""
        for name, every, zone, calendar in (
            (HELD, "1s", self.held_zone, HERE),
            (FREE, "2s", self.free_zone, HERE),
            (CHANGED, "2s", self.free_zone, LATER),
        ):
            work.add(
                name,
                ["--every", every],
                0.05,
                extra=("--timezone", zone, "--exclude-calendar", calendar),
            )

    def record_first(self, url: str) -> None:
        (row,) = query(url, "SELECT next_run_at FROM task WHERE name = %s", (HELD,))
        self.first_firing = row["next_run_at"]

    def change(self, cli: Any, url: str, *, timeout: float = 60) -> None:
        """`calendars add soak-later --replace` with the free zone's date too, retried through a
        server restart (a failed call may have committed: the version is uncertain until the
        call that succeeds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                now = query(url, "SELECT now() AS t")[0]["t"]
            except Exception as exc:  # the server restarting, the switchover's gap
                self.change_failures.append(f"clock: {exc}".splitlines()[0])
                time.sleep(1)
                continue
            self.change_before = self.change_before or now
            done = cli(
                "calendars", "add", LATER, *_dates(self.changed_dates()), "--replace", url=url
            )
            if done.code == 0:
                try:
                    self.change_after = query(url, "SELECT now() AS t")[0]["t"]
                except Exception as exc:
                    self.change_failures.append(f"clock after: {exc}".splitlines()[0])
                else:
                    return
            else:
                self.change_failures.append(done.err.strip())
            time.sleep(1)

    def excluded(self, task: str, created_at: datetime, *, ran: bool) -> set[date]:
        """The dates excluded for an occurrence of `task` dispatched at `created_at`: for one
        that was queued, the versions surely in force then (the change's, once its call had
        returned); for an `excluded` row, every version that may have been."""
        if task != CHANGED:
            return set(self.calendars[HERE])
        if ran:
            new = self.change_after is not None and created_at > self.change_after
        else:
            new = self.change_before is not None and created_at >= self.change_before
        return set(self.changed_dates() if new else self.calendars[LATER])

    def zone(self, task: str) -> str:
        return self.held_zone if task == HELD else self.free_zone

    def describe(self) -> dict[str, Any]:
        return {
            "zones": {HELD: self.held_zone, FREE: self.free_zone, CHANGED: self.free_zone},
            "dates": {HERE: str(self.here), "free zone": str(self.there)},
            "changed": [str(self.change_before), str(self.change_after)],
            "change_failures": len(self.change_failures),
        }


def _dates(days: list[date]) -> list[str]:
    return [opt for day in days for opt in ("--date", day.isoformat())]


class Verdict:
    """What the calendar tasks' firings became, against the plan (see the module docstring)."""

    def __init__(self, plan: Plan, rows: list[dict[str, Any]], stopped: datetime) -> None:
        self.plan, self.stopped = plan, stopped
        self.problems: list[str] = []
        self.rows = {task: [r for r in rows if r["task"] == task] for task in TASKS}
        self._judge_zones()
        self._judge_dates(rows)
        self.covered = self._judge_held()
        self.free_runs = sum(r["runs"] for r in self.rows[FREE])
        if not self.free_runs:
            self.problems.append(f"{FREE} never ran: no date of its zone was excluded")
        self.change_applied = self._judge_changed()

    def _judge_zones(self) -> None:
        for task, rows in self.rows.items():
            zone = self.plan.zone(task)
            if any(r["timezone"] != zone for r in rows):
                self.problems.append(f"{task} is not in {zone}")
        for zone, day in (
            (self.plan.held_zone, self.plan.here),
            (self.plan.free_zone, self.plan.there),
        ):
            if local_date(self.stopped, zone) != day:
                self.problems.append(
                    f"the soak crossed midnight in {zone} (stopped {self.stopped})"
                )

    def _judge_dates(self, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            zone, where = self.plan.zone(r["task"]), f"{r['task']} occurrence {r['id']}"
            last = r["last_scheduled_for"] or r["scheduled_for"]
            excluded_row = r["status"] == "skipped" and r["reason"] == "excluded"
            if r["trigger"] != "schedule":
                self.problems.append(f"{where} was not fired by its schedule ({r['trigger']})")
            elif excluded_row:
                held = self.plan.excluded(r["task"], r["created_at"], ran=False)
                days = {local_date(r["scheduled_for"], zone), local_date(last, zone)}
                if not days <= held:
                    self.problems.append(
                        f"{where} excluded {r['scheduled_for']}..{last} ({sorted(map(str, days))}"
                        f" in {zone}); its calendars held {sorted(map(str, held))}"
                    )
            elif r["status"] != "skipped" or r["runs"]:
                held = self.plan.excluded(r["task"], r["created_at"], ran=True)
                day = local_date(r["scheduled_for"], zone)
                if day in held:
                    self.problems.append(
                        f"{where} ({r['status']}, {r['runs']} run(s)) fired at"
                        f" {r['scheduled_for']}, {day} in {zone}: an excluded date,"
                        f" dispatched {r['created_at']}"
                    )

    def _judge_held(self) -> int:
        """The firings of cal-held its `excluded` rows cover from its first to the stop, each
        second once; a gap, an overlap, a wrong count or another row is a problem."""
        rows, expect = self.rows[HELD], self.plan.first_firing
        covered = 0
        for r in rows:
            last = r["last_scheduled_for"] or r["scheduled_for"]
            where = f"{HELD} occurrence {r['id']} ({r['scheduled_for']}..{last})"
            if (r["status"], r["reason"]) != ("skipped", "excluded"):
                self.problems.append(f"{where} is {r['status']}/{r['reason']}, not excluded")
                continue
            if r["scheduled_for"] != expect:
                self.problems.append(f"{where} does not start at the next firing, {expect}")
            firings = round((last - r["scheduled_for"]) / SECOND) + 1
            if r["firing_count"] != firings:
                self.problems.append(f"{where} counts {r['firing_count']} firings, not {firings}")
            covered += min(firings, max(0, round((self.stopped - r["scheduled_for"]) / SECOND) + 1))
            expect = last + SECOND
        if expect is None or expect <= self.stopped - SETTLE:
            self.problems.append(f"{HELD}'s firings from {expect} to the stop have no row")
        return covered

    def _judge_changed(self) -> int:
        rows, plan = self.rows[CHANGED], self.plan
        if plan.change_after is None:
            self.problems.append(
                f"the calendar change never succeeded: {plan.change_failures[-3:]}"
            )
            return 0
        before = [r for r in rows if r["created_at"] < plan.change_before and r["runs"]]
        after = [r for r in rows if r["created_at"] >= plan.change_before]
        excluded = [r for r in after if r["reason"] == "excluded"]
        if not before:
            self.problems.append(f"{CHANGED} never ran before its calendar changed")
        if not excluded:
            self.problems.append(f"{CHANGED} has no excluded row dispatched after the change")
            return 0
        first = min(r["scheduled_for"] for r in excluded)
        later = [r for r in rows if r["scheduled_for"] > first and r["reason"] != "excluded"]
        if later:
            self.problems.append(
                f"{CHANGED} has rows after its first excluded firing {first}: "
                f"{[(r['id'], r['status'], r['reason']) for r in later[:5]]}"
            )
        reach = max(r["last_scheduled_for"] or r["scheduled_for"] for r in excluded)
        if reach < self.stopped - SETTLE:
            self.problems.append(f"{CHANGED}'s excluded rows end at {reach}, before the stop")
        return int(bool(before))

    def windows(self) -> dict[str, int]:
        return {
            "excluded_firings_recorded": self.covered,
            "calendar_other_zone_ran": self.free_runs,
            "calendar_change_applied": self.change_applied,
        }

    def figures(self) -> dict[str, Any]:
        return {
            **self.plan.describe(),
            "rows": {task: len(rows) for task, rows in self.rows.items()},
            "runs": {task: sum(r["runs"] for r in rows) for task, rows in self.rows.items()},
            "excluded_firings": {
                task: sum(r["firing_count"] for r in rows if r["reason"] == "excluded")
                for task, rows in self.rows.items()
            },
            **self.windows(),
            "problems": len(self.problems),
        }


def judge(url: str, plan: Plan, stopped: datetime) -> Verdict:
    return Verdict(plan, query(url, OCCURRENCES, (list(TASKS),)), stopped)
