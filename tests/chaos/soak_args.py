"""The soak's manual triggers with arguments (issue 38 item 3, `tasks trigger --arg/--args-json`)
and the verdict on what the jobs saw.

The tasks (tests/chaos/soak_workload.py `build_args`) are one per executor that runs on the
daemons' machine: a shell job (SCHEDULER_ARGS), a python job in a worker and an in-process one
(`ctx.args`, tests/chaos/soak_jobs.py `record_args`). Each fires every 15 s on its own (those
firings carry no arguments), fails the first attempt of every occurrence and is retried after 1 s;
every attempt records what it saw in a file of its own (null for no arguments), named by its
run's uuid.

The fault driver calls `Triggers.fire` at seeded random times, as an operator would, through the
CLI: each task is triggered, most often with arguments (`--arg KEY=VALUE` pairs, or `--args-json`
with nesting, numbers, unicode, quotes and newlines; each set with a nonce of its own), otherwise
without. A trigger whose CLI call failed (the server restarting, the switchover's gap) may or may
not have committed: its arguments are accepted once, by nonce, if the database holds them.

`Verdict` judges the database's occurrences of those tasks, the records and what was sent:
- every attempt saw exactly its occurrence's recorded arguments (a retry sees them again), and
  none when the occurrence holds none;
- an occurrence triggered without arguments, or fired by its schedule, holds none;
- the arguments recorded on a triggered occurrence equal the ones sent, and no occurrence holds
  arguments nobody sent.
Its window, `args_seen_on_a_retry`, is the fewest occurrences, over the three executors, whose
retry saw their arguments: a seed where some executor never had one is visible.
"""

import json
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support import query

WAITING = """
    SELECT EXISTS (SELECT FROM occurrence o JOIN task t ON t.id = o.task_id
                   WHERE t.name = ANY(%s) AND o.args IS NOT NULL
                     AND o.status IN ('queued', 'launching', 'running')) AS waiting"""
OCCURRENCES = """
    SELECT o.id, t.name AS task, o.trigger, o.args
    FROM occurrence o JOIN task t ON t.id = o.task_id WHERE t.name = ANY(%s) ORDER BY o.id"""

# Values a trigger's arguments are drawn from: what a shell, JSON or the database could mangle.
TEXTS = ["plain", "with space", 'quote " and \\ backslash', "new\nline", "é ü 雪 🙂", "a=b=c", ""]


class Triggers:
    """The manual triggers the driver sent, with or without arguments, by occurrence id."""

    def __init__(self, tasks: dict[str, str], rng: random.Random) -> None:
        self.tasks, self.rng = tasks, rng
        self.sent: dict[int, dict[str, Any] | None] = {}  # occurrence id -> the arguments sent
        self.uncertain: dict[str, dict[str, Any]] = {}  # nonce -> arguments of a failed call
        self.failed: list[str] = []  # the failed calls' one line each
        self.nonces = 0

    def arguments(self) -> tuple[dict[str, Any], list[str]]:
        """A seeded set of arguments and the CLI options that send it."""
        r = self.rng
        self.nonces += 1
        nonce = f"n{self.nonces}"
        if r.random() < 0.5:  # --arg KEY=VALUE: every value a string
            pairs = {"nonce": nonce, **{f"k{i}": r.choice(TEXTS) for i in range(r.randint(0, 4))}}
            return pairs, [opt for k, v in pairs.items() for opt in ("--arg", f"{k}={v}")]
        args: dict[str, Any] = {
            "nonce": nonce,
            "count": r.randint(-(2**40), 2**40),
            "flag": r.choice([True, False, None]),
            "nested": {"list": [r.choice(TEXTS), r.randint(0, 9), {"deep": r.choice(TEXTS)}]},
            "text": r.choice(TEXTS),
        }
        if r.random() < 0.2:  # a larger set: kilobytes in one environment variable
            args["bulk"] = "x" * r.randint(4_000, 20_000)
        return args, ["--args-json", json.dumps(args, ensure_ascii=r.random() < 0.5)]

    def waiting(self, url: str) -> bool:
        """Whether an occurrence triggered with arguments has not ended yet (its retry, which
        enters the window, may still come)."""
        return bool(query(url, WAITING, (sorted(self.tasks),))[0]["waiting"])

    def fire(self, cli: Any, url: str) -> None:
        """Triggers each task once, in a seeded order: four in five with arguments."""
        for name in self.rng.sample(sorted(self.tasks), len(self.tasks)):
            args, options = self.arguments() if self.rng.random() < 0.8 else (None, [])
            done = cli("tasks", "trigger", name, *options, "--json", url=url)
            if done.code == 0:
                self.sent[done.json()["id"]] = args
                continue
            self.failed.append(done.err.strip())
            if args is not None:
                self.uncertain[args["nonce"]] = args


def seen(folder: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The attempts' records, and a line for each one that is not a JSON object."""
    records, unreadable = [], []
    for path in sorted(folder.iterdir()):
        if path.name.startswith("."):
            continue  # written aside by a job killed before its rename
        try:
            record = json.loads(path.read_text())
        except ValueError as exc:
            unreadable.append(f"{path.name}: {exc}: {path.read_text()[:200]!r}")
            continue
        records.append(record)
    return records, unreadable


class Verdict:
    """What the jobs of the tasks triggered with arguments saw, against what was recorded and
    what was sent."""

    def __init__(
        self,
        occurrences: list[dict[str, Any]],
        records: list[dict[str, Any]],
        triggers: Triggers,
        *,
        unreadable: Sequence[str] = (),
    ) -> None:
        self.kinds = triggers.tasks
        self.problems: list[str] = list(unreadable)
        self.recorded = {o["id"]: o for o in occurrences}
        self.records = records
        self._judge_recorded(triggers)
        self._judge_seen()

    def _judge_recorded(self, triggers: Triggers) -> None:
        claimed: set[str] = set()
        for occ_id, sent in triggers.sent.items():
            row = self.recorded.get(occ_id)
            if row is None:
                self.problems.append(f"occurrence {occ_id} was triggered but is not recorded")
            elif row["trigger"] != "manual" or row["args"] != sent:
                self.problems.append(
                    f"occurrence {occ_id} ({row['trigger']}) records {row['args']!r}; sent {sent!r}"
                )
        for occ_id, row in self.recorded.items():
            if row["args"] is None or occ_id in triggers.sent:
                continue
            nonce = row["args"].get("nonce")
            sent = triggers.uncertain.get(nonce)
            if row["trigger"] == "manual" and row["args"] == sent and nonce not in claimed:
                claimed.add(nonce)  # a failed call that committed after all
                continue
            self.problems.append(
                f"occurrence {occ_id} ({row['trigger']}) records {row['args']!r}; nobody sent them"
            )

    def _judge_seen(self) -> None:
        for record in self.records:
            row = self.recorded.get(record["occ"])
            where = f"{record['task']} run {record['run']} (attempt {record['attempt']})"
            if row is None:
                self.problems.append(f"{where} ran occurrence {record['occ']}, not recorded")
            elif row["task"] != record["task"]:
                self.problems.append(f"{where} ran occurrence {record['occ']} of {row['task']}")
            elif record["args"] != row["args"]:
                self.problems.append(
                    f"{where} saw {record['args']!r}; occurrence {record['occ']} records"
                    f" {row['args']!r}"
                )

    def retried(self) -> Counter[str]:
        """Per executor, the occurrences with arguments whose retry saw them (each once)."""
        occurrences = {
            (self.kinds[r["task"]], r["occ"])
            for r in self.records
            if r["attempt"] > 1
            and r["args"] is not None
            and r["args"] == self.recorded.get(r["occ"], {}).get("args")
        }
        counts = Counter(dict.fromkeys(self.kinds.values(), 0))
        counts.update(kind for kind, _ in occurrences)
        return counts

    def window(self) -> int:
        """The fewest occurrences, over the executors, whose retry saw their arguments."""
        return min(self.retried().values())

    def figures(self, triggers: Triggers) -> dict[str, Any]:
        return {
            "triggered": len(triggers.sent),
            "with_args": sum(a is not None for a in triggers.sent.values()),
            "failed_calls": len(triggers.failed),
            "occurrences": len(self.recorded),
            "attempts_seen": dict(Counter(self.kinds[r["task"]] for r in self.records)),
            "retries_saw_args": dict(self.retried()),
            "problems": len(self.problems),
        }


def judge(url: str, folder: Path, triggers: Triggers) -> Verdict:
    """The verdict from the database at `url` and the records in `folder`."""
    occurrences = query(url, OCCURRENCES, (sorted(triggers.tasks),))
    records, unreadable = seen(folder)
    return Verdict(occurrences, records, triggers, unreadable=unreadable)
