"""The soak's verdict on notifications (issue 35, ADR 0016): what the fleet owed the tasks with a
notify URL (tests/chaos/soak_workload.py `build_notify`), judged from the database against every
POST the test's receiver recorded (tests/support.py `NotificationReceiver`).

At the end of the faults the soak pauses those tasks and waits, daemons still running, until
none of their firings is active, every deadline has passed, every notification owed is in the
outbox and none is undelivered (`drain`). Then `Verdict` checks:

- every finished firing of those tasks owes one outbox row per event its task selected: failed
  or interrupted `failure`, `timeout`, `expired`, `skipped` (not the operator's own skips:
  paused, parked, rescheduled, deleted), and `deadline` for every firing not succeeded by its
  scheduled time plus the deadline; a row of a final event names the firing's final status;
  the firings one dispatch recorded share one row per event and reason (`firing_count`, the
  span `first_scheduled_for` to `last_scheduled_for`: `COVERED`);
- every row was delivered and received, at least one POST of it answered 200;
- every POST carried its row's `delivery_id` in the body and as `Idempotency-Key`, and its
  payload names the row's occurrence, task and event; one id per (occurrence, event), and as
  many distinct ids received as outbox rows (no id for a non-row).
"""

import time
from collections import Counter, defaultdict
from typing import Any

from scheduler_daemon.domain.status import DEFAULT_NOTIFY_ON
from tests.support import query

# The final statuses and the event each owes (outbox_enqueue's mapping, as the issue states it).
EVENTS = {
    "failed": "failure",
    "interrupted": "failure",
    "timeout": "timeout",
    "expired": "expired",
    "skipped": "skipped",
}
# Skips an operator command decided: no notification (ADR 0016, Consequences).
OPERATOR_SKIPS = ("paused", "parked", "rescheduled", "deleted")

OWED = """
    SELECT o.id AS occurrence_id, t.id AS task_id, t.name AS task, o.status, o.reason,
           CASE WHEN t.deadline IS NOT NULL AND NOT (o.status = 'success'
                    AND o.finished_at <= o.scheduled_for + t.deadline)
                THEN true ELSE false END AS deadline_owed,
           t.notify_on
    FROM occurrence o JOIN task t ON t.id = o.task_id
    WHERE t.name = ANY(%(names)s) AND o.status NOT IN ('queued', 'launching', 'running')"""

# A `deadline` row written before its firing had a row (revision 0030) holds no occurrence: its
# firing is the scheduled occurrence of its (task, scheduled_for), found here (`occurrence_id`)
# beside what the row itself holds (`row_occurrence_id`, what its payload names).
ROWS = """
    SELECT n.id, o.id AS occurrence_id, n.occurrence_id AS row_occurrence_id, n.task_id,
           t.name AS task, n.event, n.delivery_id::text, n.attempts,
           n.delivered_at IS NOT NULL AS delivered, o.status
    FROM notification_outbox n JOIN task t ON t.id = n.task_id
    LEFT JOIN occurrence o ON o.id = coalesce(n.occurrence_id, (
        SELECT f.id FROM occurrence f WHERE f.task_id = n.task_id
          AND f.scheduled_for = n.scheduled_for AND f.trigger = 'schedule'))
    ORDER BY n.id"""

# A notification of one dispatch's firings (issue 44: one per task, event and reason, keyed on
# the first) stands for every scheduled firing of its task in its span, of its event (and for
# `skipped`, of its reason): the (occurrence, event) pairs it covers beside its own.
COVERED = """
    SELECT o.id AS occurrence_id, n.event
    FROM notification_outbox n
    JOIN occurrence o ON o.task_id = n.task_id AND o.trigger = 'schedule'
        AND o.scheduled_for >= (n.payload ->> 'first_scheduled_for')::timestamptz
        AND o.scheduled_for <= (n.payload ->> 'last_scheduled_for')::timestamptz
    WHERE (n.payload ->> 'firing_count')::bigint > 1
      AND (n.event <> 'skipped' OR (o.status = 'skipped'
           AND coalesce(o.reason, o.error) IS NOT DISTINCT FROM n.payload ->> 'reason'))"""

PENDING = """
    SELECT (SELECT count(*) FROM occurrence o JOIN task t ON t.id = o.task_id
            WHERE t.name = ANY(%(names)s)
              AND o.status IN ('queued', 'launching', 'running')) AS active,
           (SELECT count(*) FROM occurrence o JOIN task t ON t.id = o.task_id
            WHERE t.name = ANY(%(names)s) AND t.deadline IS NOT NULL
              AND o.scheduled_for + t.deadline > now()) AS deadline_ahead,
           (SELECT count(*) FROM notification_outbox WHERE delivered_at IS NULL) AS undelivered"""


def owed(url: str, names: list[str]) -> set[tuple[int, str]]:
    """The (occurrence, event) pairs the finished firings of tasks `names` owe."""
    pairs = set()
    for o in query(url, OWED, {"names": names}):
        event = EVENTS.get(o["status"])
        if o["status"] == "skipped" and o["reason"] in OPERATOR_SKIPS:
            event = None
        selected = o["notify_on"] or DEFAULT_NOTIFY_ON  # none of the soak's: the fleet has none
        if event is not None and event in selected:
            pairs.add((o["occurrence_id"], event))
        if o["deadline_owed"] and "deadline" in selected:
            pairs.add((o["occurrence_id"], "deadline"))
    return pairs


def covered(url: str) -> set[tuple[int, str]]:
    """The (occurrence, event) pairs the notifications of a dispatch's many firings stand for."""
    return {(r["occurrence_id"], r["event"]) for r in query(url, COVERED)}


def drain(url: str, cli: Any, names: list[str], timeout: float = 90.0) -> dict[str, Any]:
    """Pauses tasks `names` and waits, daemons running, until none of their firings is active,
    their deadlines have passed, each notification owed has its row and none is undelivered.
    Returns what was left when it stopped waiting (all zero: drained) and how long it took."""
    for name in names:
        paused = cli("tasks", "pause", name, url=url)
        assert paused.code == 0, paused.err
    began = time.monotonic()
    while True:
        (left,) = query(url, PENDING, {"names": names})
        rows = {(r["occurrence_id"], r["event"]) for r in query(url, ROWS)}
        left["unwritten"] = len(owed(url, names) - rows - covered(url))
        if not any(left.values()) or time.monotonic() - began > timeout:
            return {**left, "seconds": round(time.monotonic() - began, 1)}
        time.sleep(0.5)


class Verdict:
    """The notifications of tasks `names` against the POSTs `received` (the receiver's records:
    body, headers, status); `problems` lists every violation."""

    def __init__(self, url: str, names: list[str], received: list[dict[str, Any]]) -> None:
        self.rows = query(url, ROWS)
        self.statuses = query(
            url,
            """SELECT t.name, o.status, count(*) AS n FROM occurrence o
               JOIN task t ON t.id = o.task_id WHERE t.name = ANY(%s)
               GROUP BY 1, 2 ORDER BY 1, 2""",
            (names,),
        )
        self.received = received
        self.problems: list[str] = []
        self._judge(owed(url, names) - covered(url))

    def _judge(self, owed: set[tuple[int, str]]) -> None:
        by_pair = {(r["occurrence_id"], r["event"]): r for r in self.rows}
        by_id = {r["delivery_id"]: r for r in self.rows}
        posts: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for post in self.received:
            posts[str(post["body"].get("delivery_id"))].append(post)
        self.problems += [
            f"occurrence {o} owes a {e!r} notification and has no outbox row"
            for o, e in sorted(owed - set(by_pair))
        ]
        self.problems += [
            f"outbox row {r['id']} ({r['event']}) for occurrence {r['occurrence_id']} whose"
            f" final status is {r['status']!r}"
            for r in self.rows
            if r["event"] != "deadline" and EVENTS.get(r["status"]) != r["event"]
        ]
        for r in self.rows:
            what = f"outbox row {r['id']} (occurrence {r['occurrence_id']}, {r['event']})"
            if not r["delivered"]:
                self.problems.append(f"{what} never marked delivered")
            if r["delivery_id"] not in posts:
                self.problems.append(f"{what} never received (delivery_id {r['delivery_id']})")
            elif all(p["status"] != 200 for p in posts[r["delivery_id"]]):
                self.problems.append(f"{what} received, but never answered 200")
        self.problems += [
            f"{len(copies)} POST(s) of delivery_id {i} that no outbox row holds"
            for i, copies in posts.items()
            if i not in by_id
        ]
        ids_of_pair: dict[tuple[Any, Any], set[str]] = defaultdict(set)
        for delivery_id, copies in posts.items():
            row = by_id.get(delivery_id)
            for post in copies:
                body = post["body"]
                firing = row["occurrence_id"] if row is not None else body.get("occurrence_id")
                ids_of_pair[(firing, body.get("event"))].add(delivery_id)
                key = post["headers"].get("Idempotency-Key")
                if key != delivery_id:
                    self.problems.append(
                        f"a POST of delivery_id {delivery_id} with Idempotency-Key {key}"
                    )
                said = (body.get("occurrence_id"), body.get("task_id"), body.get("task"))
                if row is not None and (*said, body.get("event")) != (
                    row["row_occurrence_id"],
                    row["task_id"],
                    row["task"],
                    row["event"],
                ):
                    self.problems.append(
                        f"a POST of delivery_id {delivery_id} says occurrence/task/event"
                        f" {[*said, body.get('event')]}, its outbox row {row['id']} holds"
                        f" {[row['row_occurrence_id'], row['task_id'], row['task'], row['event']]}"
                    )
        self.problems += [
            f"occurrence {pair[0]}'s {pair[1]!r} notification came with {len(ids)} delivery ids"
            for pair, ids in ids_of_pair.items()
            if len(ids) > 1
        ]
        if len(posts) != len(self.rows):
            self.problems.append(
                f"{len(posts)} distinct delivery ids received for {len(self.rows)} outbox rows"
            )

    def figures(self) -> dict[str, Any]:
        copies = Counter(str(p["body"].get("delivery_id")) for p in self.received)
        firings: dict[str, dict[str, int]] = defaultdict(dict)
        for s in self.statuses:
            firings[s["name"]][s["status"]] = s["n"]
        return {
            "firings": dict(firings),
            "rows": len(self.rows),
            "by_event": dict(Counter(r["event"] for r in self.rows)),
            "ids_received": len(copies),
            "posts": len(self.received),
            "repeats": sum(n - 1 for n in copies.values()),
            "answered_500": sum(p["status"] == 500 for p in self.received),
            "max_attempts": max((r["attempts"] for r in self.rows), default=0),
        }
