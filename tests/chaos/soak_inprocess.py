"""The verdict on the soak's in-process jobs, read from their job log (tests/chaos/soak_jobs.py).

The log's order is the order its lines were written, across processes. The fault driver adds
`mark` lines: a daemon `frozen` (written before its SIGSTOP), `thawed` (before its SIGCONT) and
`dead` (after its exit was seen). A job that found one of its locks taken names the holder's run
and pid: if that pid was not frozen since the holder's job began, two jobs really ran at once (an
overlap: of one occurrence's attempts, of a `forbid` task's runs, of a key's jobs). A holder
frozen meanwhile did nothing while frozen, and its run was taken over while it was; if its job
still holds the lock after the thaw (the `thawed` mark is written before the SIGCONT, and the
thawed job needs a moment to return or its daemon to exit 9), or writes again beside the job that
found its lock taken, that is the "little work" a frozen daemon's job may do before its exit 9
(docs/guarantees.md, In-process jobs), counted apart. Besides: an idempotency key belongs to one
occurrence, an occurrence has one key, and each new attempt of an occurrence carries a higher
lease token.
"""

import itertools
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any


class Verdict:
    """What the in-process jobs did, and what they must not have done."""

    def __init__(self, joblog: Path) -> None:
        self.lines = [json.loads(line) for line in joblog.read_text().splitlines() if line]
        self.starts: dict[int, dict[str, Any]] = {}
        self.ends: dict[int, dict[str, Any]] = {}
        self.overlaps: list[str] = []  # locks found taken by a running (not frozen) holder
        self.beside_frozen: set[tuple[int, int]] = set()  # (frozen holder's run, finder's run)
        self.problems: list[str] = []
        self._judge()

    def _judge(self) -> None:
        frozen: set[int] = set()
        freezes: Counter[int] = Counter()  # pid -> `frozen` marks so far
        froze_at_start: dict[int, int] = {}  # run -> its pid's freezes when it began
        keys: dict[str, set[int]] = defaultdict(set)  # idempotency key -> occurrences
        tokens: dict[int, list[int]] = defaultdict(list)  # occurrence -> tokens, in log order
        occ_keys: dict[int, set[str]] = defaultdict(set)
        for line in self.lines:
            if line["e"] == "mark":
                if line["what"] == "frozen":
                    frozen.add(line["pid"])
                    freezes[line["pid"]] += 1
                elif line["what"] == "thawed":
                    frozen.discard(line["pid"])
                continue
            if line["e"] == "end":
                self.ends[line["run"]] = line
                continue
            self.starts[line["run"]] = line
            froze_at_start[line["run"]] = freezes[line["pid"]]
            keys[line["key"]].add(line["occ"])
            occ_keys[line["occ"]].add(line["key"])
            tokens[line["occ"]].append(line["token"])
            for taken in line["taken"]:
                holder = taken["holder"]
                held_by = int(holder[1]) if len(holder) == 2 and holder[1].isdigit() else None
                held_run = int(holder[0]) if held_by is not None and holder[0].isdigit() else None
                # Frozen now, or frozen since the holder's job began (and thawed a moment ago).
                frozen_over = (
                    held_run in froze_at_start
                    and held_by is not None
                    and freezes[held_by] > froze_at_start[held_run]
                )
                if held_by in frozen or frozen_over:
                    self.beside_frozen.add((int(holder[0]), line["run"]))
                else:
                    self.overlaps.append(
                        f"{line['task']} run {line['run']} (occurrence {line['occ']}, pid "
                        f"{line['pid']}) found {taken['lock']} held by run/pid {holder}"
                    )
        self.problems += [
            f"idempotency key {k} given to occurrences {sorted(o)}"
            for k, o in keys.items()
            if len(o) > 1
        ]
        self.problems += [
            f"occurrence {o} ran with keys {sorted(k)}" for o, k in occ_keys.items() if len(k) > 1
        ]
        self.problems += [
            f"occurrence {o} attempts' tokens not increasing: {t}"
            for o, t in tokens.items()
            if any(a >= b for a, b in itertools.pairwise(t))
        ]

    def residue(self) -> list[tuple[int, int]]:
        """(holder, finder) pairs where the frozen holder wrote its end after the finder began:
        work done after its thaw, beside the finder."""
        order = {id(line): i for i, line in enumerate(self.lines)}
        return [
            (holder, finder)
            for holder, finder in sorted(self.beside_frozen)
            if holder in self.ends
            and finder in self.starts
            and order[id(self.ends[holder])] > order[id(self.starts[finder])]
        ]

    def sources(self) -> set[str]:
        """The files the daemons imported the jobs from."""
        return {s["src"] for s in self.starts.values()}

    def figures(self) -> dict[str, Any]:
        died = [r for r in self.starts if r not in self.ends]
        return {
            "started": len(self.starts),
            "by_kind": dict(Counter(s["kind"] for s in self.starts.values())),
            "ended": dict(Counter(e["how"] for e in self.ends.values())),
            "died_with_their_daemon": len(died),
            "beside_a_frozen_holder": len(self.beside_frozen),
            "worked_after_thaw_beside_successor": len(self.residue()),
            "overlaps": len(self.overlaps),
        }
