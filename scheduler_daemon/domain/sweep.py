"""Interval sweeps over run history: which spans overlap, what was executing when each started,
and which budget value was in force around an instant (pure).

A span is half-open, [start, end); an end of None means still open. A span with end <= start is
empty and overlaps nothing. Every sweep sorts once and is O(n log n) plus the size of its answer.
"""

import heapq
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Span:
    """A run's time on a job slot: `ident` is the run id."""

    ident: int
    start: datetime
    end: datetime | None

    def ends_by(self, t: datetime) -> bool:
        """Whether the span is over at `t` (it is not executing at `t`)."""
        return self.end is not None and self.end <= t


def _sorted(spans: Iterable[Span]) -> list[Span]:
    return sorted(spans, key=lambda s: (s.start, s.ident))


def overlapping_pairs(spans: Iterable[Span]) -> Iterator[tuple[Span, Span]]:
    """Every pair of spans that share an instant, the earlier-starting one first."""
    active: list[Span] = []
    for span in _sorted(spans):
        active = [a for a in active if not a.ends_by(span.start)]
        if span.ends_by(span.start):
            continue  # empty
        for earlier in active:
            yield earlier, span
        active.append(span)


def executing_at_starts(spans: Iterable[Span]) -> Iterator[tuple[Span, tuple[Span, ...]]]:
    """For each span, the spans executing at its start (start <= t < end, or open), itself
    included; spans that start at one instant all count at that instant."""
    ordered = _sorted(spans)
    ends: list[tuple[datetime, int]] = []  # heap of (end, index) of the spans that have started
    live: set[int] = set()
    i = 0
    while i < len(ordered):
        t = ordered[i].start
        while ends and ends[0][0] <= t:
            live.discard(heapq.heappop(ends)[1])
        starting = []
        while i < len(ordered) and ordered[i].start == t:
            span = ordered[i]
            if not span.ends_by(t):
                starting.append(span)
                live.add(i)
                if span.end is not None:
                    heapq.heappush(ends, (span.end, i))
            i += 1
        executing = tuple(ordered[j] for j in sorted(live))
        for span in starting:
            yield span, executing


@dataclass(frozen=True)
class Change:
    """A setting's new value from `at` on."""

    at: datetime
    value: int


class SettingHistory:
    """The values one setting took over time."""

    def __init__(self, changes: Iterable[Change]) -> None:
        self.changes = sorted(changes, key=lambda c: c.at)
        self._times = [c.at for c in self.changes]

    def largest_in_force(self, low: datetime, high: datetime) -> int | None:
        """The largest value in force at any instant of [low, high]; None when no change was
        made at or before `low` (the value then is unknown)."""
        first = bisect_right(self._times, low) - 1
        if first < 0:
            return None
        last = bisect_right(self._times, high) - 1
        return max(c.value for c in self.changes[first : last + 1])
