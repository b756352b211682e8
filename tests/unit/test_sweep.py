"""Interval sweeps over run spans: overlapping pairs, what executed at each start, the budget in
force; each checked against a brute-force reading of the definition."""

from datetime import UTC, datetime, timedelta
from itertools import combinations

from hypothesis import given
from hypothesis import strategies as st

from scheduler_daemon.domain.sweep import (
    Change,
    SettingHistory,
    Span,
    executing_at_starts,
    overlapping_pairs,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def span(ident: int, start: float, end: float | None) -> Span:
    return Span(ident, at(start), None if end is None else at(end))


def _executing(s: Span, t: datetime) -> bool:
    return s.start <= t and (s.end is None or t < s.end)


def _share_an_instant(a: Span, b: Span) -> bool:
    start = max(a.start, b.start)
    ends = [e for e in (a.end, b.end) if e is not None]
    return not ends or start < min(ends)


def test_touching_spans_do_not_overlap_and_an_open_span_overlaps_everything_after() -> None:
    spans = [span(1, 0, 10), span(2, 10, 20), span(3, 15, None), span(4, 30, 31)]
    pairs = {(a.ident, b.ident) for a, b in overlapping_pairs(spans)}
    assert pairs == {(2, 3), (3, 4)}


def test_an_empty_span_overlaps_nothing() -> None:
    assert list(overlapping_pairs([span(1, 5, 5), span(2, 0, 10)])) == []


def test_spans_starting_together_all_count_at_that_start() -> None:
    spans = [span(1, 0, 5), span(2, 5, 6), span(3, 5, None), span(4, 0, 1)]
    got = {s.ident: {e.ident for e in executing} for s, executing in executing_at_starts(spans)}
    assert got == {1: {1, 4}, 4: {1, 4}, 2: {2, 3}, 3: {2, 3}}


spans_strategy = st.lists(
    st.tuples(st.integers(0, 40), st.one_of(st.none(), st.integers(0, 15))).map(
        lambda p: (p[0], None if p[1] is None else p[0] + p[1])
    ),
    max_size=25,
).map(lambda rows: [span(i + 1, s, e) for i, (s, e) in enumerate(rows)])


@given(spans_strategy)
def test_overlapping_pairs_are_exactly_the_pairs_that_share_an_instant(spans: list[Span]) -> None:
    got = {frozenset((a.ident, b.ident)) for a, b in overlapping_pairs(spans)}
    nonempty = [s for s in spans if s.end is None or s.start < s.end]
    expected = {
        frozenset((a.ident, b.ident))
        for a, b in combinations(nonempty, 2)
        if _share_an_instant(a, b)
    }
    assert got == expected


@given(spans_strategy)
def test_executing_at_each_start_matches_the_definition(spans: list[Span]) -> None:
    got = {s.ident: {e.ident for e in executing} for s, executing in executing_at_starts(spans)}
    expected = {
        s.ident: {o.ident for o in spans if _executing(o, s.start)}
        for s in spans
        if _executing(s, s.start)
    }
    assert got == expected


def test_the_largest_value_in_force_over_an_interval() -> None:
    history = SettingHistory([Change(at(10), 8), Change(at(0), 4), Change(at(20), 2)])
    assert history.largest_in_force(at(-5), at(-1)) is None  # before anything was recorded
    assert history.largest_in_force(at(1), at(2)) == 4
    assert history.largest_in_force(at(9), at(10)) == 8  # raised at the end of the interval
    assert history.largest_in_force(at(19.5), at(20.5)) == 8  # lowered inside it
    assert history.largest_in_force(at(21), at(22)) == 2
