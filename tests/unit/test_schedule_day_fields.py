"""Both day fields restricted: a day that matches either one fires, `#`, a weekday's `L` (`L5`)
and `W` included (issue 38 item 4, ADR 0019). croniter reads those as "both match": `0 0 16,18 *
3#3` fired only on third Wednesdays, `0 0 15W * 1` ignored the Mondays, and `0 0 8 * 5#3` was
refused as never firing.

Every vector below was written by hand from a printed calendar of 2026 (`python -m calendar
2026`), not from any cron library: the weekdays and the nth weekdays of each month are read off
it, and the DST changes are tzdata's rules for 2026 (America/New_York: 2026-03-08 02:00 EST →
03:00 EDT, 2026-11-01 02:00 EDT → 01:00 EST; Europe/Berlin: 2026-03-29 02:00 CET → 03:00 CEST,
2026-10-25 03:00 CEST → 02:00 CET). The UTC instants are the local times minus the offset. The
property test checks the walk against a day predicate of its own (calendar arithmetic, no
croniter) over random expressions and years.
"""

import calendar
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_daemon.domain.schedule.base import ScheduleError
from scheduler_daemon.domain.schedule.cron import CronSchedule
from scheduler_daemon.domain.schedule.cron_syntax import (
    day_parts,
    splits_day_fields,
    validate_cron,
)
from tests.unit.schedule_support import fires, utc

NY, BERLIN = "America/New_York", "Europe/Berlin"

# (expression, zone, dst_gap, dst_overlap, after, the fire times in UTC); the comment says which
# days match which field.
VECTORS = [
    pytest.param(
        # 16th, 18th, third Wednesday (Feb 18, Mar 18, Apr 15); Feb 18 is both: one firing.
        # Midnight EST is 05:00 UTC, EDT (from Mar 8) 04:00 UTC.
        "0 0 16,18 * 3#3",
        NY,
        "shift",
        "first",
        utc(2026, 2, 1),
        [
            utc(2026, 2, 16, 5),
            utc(2026, 2, 18, 5),
            utc(2026, 3, 16, 4),
            utc(2026, 3, 18, 4),
            utc(2026, 4, 15, 4),
            utc(2026, 4, 16, 4),
            utc(2026, 4, 18, 4),
        ],
        id="list and # (the issue's), New York across the spring change",
    ),
    pytest.param(
        # The issue's `0 0 8 * 5#3` at 09:00: the 8th, third Friday (Oct 16, Nov 20, Dec 18).
        # 09:00 EDT is 13:00 UTC, EST (from Nov 1) 14:00 UTC.
        "0 9 8 * 5#3",
        NY,
        "shift",
        "first",
        utc(2026, 10, 1),
        [
            utc(2026, 10, 8, 13),
            utc(2026, 10, 16, 13),
            utc(2026, 11, 8, 14),
            utc(2026, 11, 20, 14),
            utc(2026, 12, 8, 14),
            utc(2026, 12, 18, 14),
        ],
        id="a day croniter never matched, New York across the fall change",
    ),
    pytest.param(
        # 1st, first Monday (Oct 5, Nov 2, Dec 7). Nov 1 (a Sunday) is the 1st: 01:30 happens
        # twice, EDT (05:30 UTC) then EST (06:30 UTC); `first` fires the first.
        "30 1 1 * 1#1",
        NY,
        "shift",
        "first",
        utc(2026, 9, 30),
        [
            utc(2026, 10, 1, 5, 30),
            utc(2026, 10, 5, 5, 30),
            utc(2026, 11, 1, 5, 30),
            utc(2026, 11, 2, 6, 30),
            utc(2026, 12, 1, 6, 30),
            utc(2026, 12, 7, 6, 30),
        ],
        id="# on the overlap day, first",
    ),
    pytest.param(
        "30 1 1 * 1#1",
        NY,
        "shift",
        "both",
        utc(2026, 9, 30),
        [
            utc(2026, 10, 1, 5, 30),
            utc(2026, 10, 5, 5, 30),
            utc(2026, 11, 1, 5, 30),
            utc(2026, 11, 1, 6, 30),
            utc(2026, 11, 2, 6, 30),
            utc(2026, 12, 1, 6, 30),
            utc(2026, 12, 7, 6, 30),
        ],
        id="# on the overlap day, both",
    ),
    pytest.param(
        # Sundays, and 15W: Mar 15 is a Sunday, so the nearest weekday is Monday the 16th; Apr 15
        # is a Wednesday. Mar 29 (a Sunday) 02:30 does not exist in Berlin: `shift` fires where
        # the gap ends, 03:00 CEST = 01:00 UTC. 02:30 CET is 01:30 UTC, CEST 00:30 UTC.
        "30 2 15W * 0",
        BERLIN,
        "shift",
        "first",
        utc(2026, 3, 10),
        [
            utc(2026, 3, 15, 1, 30),
            utc(2026, 3, 16, 1, 30),
            utc(2026, 3, 22, 1, 30),
            utc(2026, 3, 29, 1),
            utc(2026, 4, 5, 0, 30),
            utc(2026, 4, 12, 0, 30),
            utc(2026, 4, 15, 0, 30),
            utc(2026, 4, 19, 0, 30),
        ],
        id="W and a weekday (the issue's), Berlin across the spring gap, shift",
    ),
    pytest.param(
        "30 2 15W * 0",
        BERLIN,
        "skip",
        "first",
        utc(2026, 3, 10),
        [
            utc(2026, 3, 15, 1, 30),
            utc(2026, 3, 16, 1, 30),
            utc(2026, 3, 22, 1, 30),
            utc(2026, 4, 5, 0, 30),
            utc(2026, 4, 12, 0, 30),
            utc(2026, 4, 15, 0, 30),
            utc(2026, 4, 19, 0, 30),
        ],
        id="W and a weekday, Berlin across the spring gap, skip",
    ),
    pytest.param(
        # The 24th, fourth Sunday (Sep 27, Oct 25, Nov 22, Dec 27). Oct 25 02:30 happens twice in
        # Berlin: CEST (00:30 UTC) then CET (01:30 UTC); `second` fires the second.
        "30 2 24 * 0#4",
        BERLIN,
        "shift",
        "second",
        utc(2026, 9, 1),
        [
            utc(2026, 9, 24, 0, 30),
            utc(2026, 9, 27, 0, 30),
            utc(2026, 10, 24, 0, 30),
            utc(2026, 10, 25, 1, 30),
            utc(2026, 11, 22, 1, 30),
            utc(2026, 11, 24, 1, 30),
            utc(2026, 12, 24, 1, 30),
            utc(2026, 12, 27, 1, 30),
        ],
        id="# on the overlap day in Berlin, second",
    ),
    pytest.param(
        # The 13th, last Friday (Feb 27, Mar 27, Apr 24). Noon CET is 11:00 UTC, CEST 10:00 UTC.
        "0 12 13 * L5",
        BERLIN,
        "shift",
        "first",
        utc(2026, 2, 1),
        [
            utc(2026, 2, 13, 11),
            utc(2026, 2, 27, 11),
            utc(2026, 3, 13, 11),
            utc(2026, 3, 27, 11),
            utc(2026, 4, 13, 10),
            utc(2026, 4, 24, 10),
        ],
        id="a weekday's L, Berlin across the spring change",
    ),
    pytest.param(
        # Fridays, and 1W: Jul 1 is a Wednesday; Aug 1 is a Saturday whose nearest weekday in
        # its month is Monday the 3rd (Friday Jul 31 is another month).
        "0 0 1W * 5",
        "UTC",
        "shift",
        "first",
        utc(2026, 6, 30, 12),
        [
            utc(2026, 7, 1),
            utc(2026, 7, 3),
            utc(2026, 7, 10),
            utc(2026, 7, 17),
            utc(2026, 7, 24),
            utc(2026, 7, 31),
            utc(2026, 8, 3),
            utc(2026, 8, 7),
        ],
        id="W at a month's start",
    ),
]


@pytest.mark.parametrize(("expr", "zone", "gap", "overlap", "after", "expected"), VECTORS)
def test_a_day_that_matches_either_field_fires(  # noqa: PLR0917 - the vector's columns
    expr: str, zone: str, gap: str, overlap: str, after: datetime, expected: list[datetime]
) -> None:
    schedule = CronSchedule(expr, zone, gap, overlap)
    assert fires(schedule, after, len(expected)) == expected
    # The same firings newest first, and one at a time, as dispatch, backfill and audit walk.
    last = expected[-1]
    assert list(schedule.fire_times_reversed(last, since=expected[0])) == expected[::-1]
    assert [schedule.next_after(t - timedelta(microseconds=1)) for t in expected] == expected
    assert [schedule.prev_at_or_before(t) for t in expected] == expected
    assert schedule.count_between(expected[0], last, cap=100) == (len(expected), True)


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        # croniter's reading, as builds before revision 0026 fired: third Wednesdays only.
        (
            "0 0 16,18 * 3#3",
            utc(2026, 2, 1),
            [utc(2026, 2, 18), utc(2026, 3, 18), utc(2026, 4, 15)],
        ),
        # 15W only: Mar 16 (the 15th is a Sunday), Apr 15, May 15 (a Friday).
        ("0 0 15W * 1", utc(2026, 3, 1), [utc(2026, 3, 16), utc(2026, 4, 15), utc(2026, 5, 15)]),
        # Never: the third Friday is the 15th to the 21st.
        ("0 0 8 * 5#3", utc(2026, 3, 1), []),
    ],
)
def test_the_old_reading_is_kept_for_the_history_older_builds_wrote(
    expr: str, after: datetime, expected: list[datetime]
) -> None:
    schedule = CronSchedule(expr, either_days=False)
    assert fires(schedule, after, 3) == expected


def test_the_issues_expressions_are_accepted_and_a_day_neither_field_can_match_is_not() -> None:
    for expr in ("0 0 8 * 5#3", "0 0 16,18 * 3#3", "0 0 15W * 1", "0 0 31 2 5#3"):
        validate_cron(expr)
    # 30 February: the day-of-week field is `*`, so there is nothing to match either way.
    with pytest.raises(ScheduleError, match="it never fires"):
        validate_cron("0 0 30 2 *")
    # 31 February, or the fifth Monday of February: only a leap year whose February starts on
    # a Monday has one (2044-02-29 is the next after 2026), and that is enough to fire.
    assert fires(CronSchedule("0 0 31 2 1#5"), utc(2026, 1, 1), 1) == [utc(2044, 2, 29)]


@pytest.mark.parametrize(
    ("expr", "splits"),
    [
        ("0 0 16,18 * 3#3", True),
        ("0 0 15W * 1", True),
        ("0 0 16 * L5", True),
        ("0 0 L * 5#3", True),
        ("0 0 15W * 3#3", True),
        ("0 0 16 * 3#3,5#1 30", True),
        ("0 0 * * 3#3", False),  # one day field restricted: nothing to put together
        ("0 0 ? * 3#3", False),
        ("0 0 15W * *", False),
        ("0 0 16 * 3", False),  # plain fields: croniter already reads them as "either"
        ("0 0 L * 1", False),
        ("0 0 */2 * mon-fri", False),
        ("@weekly", False),
        ("not cron", False),
    ],
)
def test_which_expressions_the_rule_changes(expr: str, splits: bool) -> None:
    assert splits_day_fields(expr) is splits


def test_plain_fields_lists_ranges_steps_l_and_question_marks_read_as_before() -> None:
    # One part, the expression itself: croniter's own walk, unchanged.
    for expr in ("0 0 16 * 3", "0 0 L * 1", "0 0 1-5,20 * mon-fri", "0 0 */10 * 0", "0 0 ? * 1#2"):
        assert day_parts(expr) == (expr,)
    # The 16th and Wednesdays (croniter's own either), and the 1st..5th and 20th and weekdays.
    assert fires(CronSchedule("0 0 16 * 3"), utc(2026, 1, 12), 4) == [
        utc(2026, 1, 14),
        utc(2026, 1, 16),
        utc(2026, 1, 21),
        utc(2026, 1, 28),
    ]


# -- property: the walk against a day predicate of the test's own ------------------------------


def _nth_weekdays(year: int, month: int, weekday: int) -> list[int]:
    """The days of `month` that fall on cron weekday `weekday` (0 = Sunday)."""
    python_weekday = (weekday - 1) % 7  # calendar: 0 = Monday
    days = calendar.monthrange(year, month)[1]
    return [d for d in range(1, days + 1) if date(year, month, d).weekday() == python_weekday]


def _nearest_weekday(year: int, month: int, day: int) -> int:
    """Quartz's `dW`: `day` if a weekday, else the nearest weekday within the month."""
    weekday = date(year, month, day).weekday()
    last = calendar.monthrange(year, month)[1]
    if weekday == 5:  # Saturday: Friday before, or Monday after at the month's start
        return day - 1 if day > 1 else day + 2
    if weekday == 6:  # Sunday: Monday after, or Friday before at the month's end
        return day + 1 if day < last else day - 2
    return day


def _matches(day: date, dom: tuple[str, object], dow: tuple[str, object]) -> bool:
    y, m, d = day.year, day.month, day.day
    kind, value = dom
    if kind == "days":
        dom_ok = d in value  # type: ignore[operator]
    elif kind == "last":
        dom_ok = d == calendar.monthrange(y, m)[1]
    else:  # nearest weekday
        dom_ok = d == _nearest_weekday(y, m, value)  # type: ignore[arg-type]
    kind, value = dow
    if kind == "nth":
        dow_ok = any(
            len(found := _nth_weekdays(y, m, w)) >= n and found[n - 1] == d
            for w, n in value  # type: ignore[attr-defined]
        )
    elif kind == "last":
        dow_ok = _nth_weekdays(y, m, value)[-1] == d  # type: ignore[arg-type]
    else:  # plain weekdays
        dow_ok = (day.isoweekday() % 7) in value  # type: ignore[operator]
    return dom_ok or dow_ok


@st.composite
def _day_fields(draw: st.DrawFn) -> tuple[str, str, tuple[str, object], tuple[str, object]]:
    """A day-of-month field and a day-of-week field, at least one with `#`, `L5` or `W`."""
    dom_kind = draw(st.sampled_from(["days", "last", "nearest"]))
    if dom_kind == "days":
        days = draw(st.lists(st.integers(1, 31), min_size=1, max_size=3, unique=True))
        dom_text, dom = ",".join(map(str, sorted(days))), ("days", frozenset(days))
    elif dom_kind == "last":
        dom_text, dom = "L", ("last", None)
    else:
        w = draw(st.integers(1, 28))
        dom_text, dom = f"{w}W", ("nearest", w)
    dow_kind = draw(
        st.sampled_from(["nth", "last"] if dom_kind != "nearest" else ["nth", "last", "plain"])
    )
    if dow_kind == "nth":
        pairs = draw(
            st.lists(
                st.tuples(st.integers(0, 6), st.integers(1, 5)),
                min_size=1,
                max_size=2,
                unique_by=lambda p: p[0],
            )
        )
        dow_text, dow = ",".join(f"{w}#{n}" for w, n in pairs), ("nth", tuple(pairs))
    elif dow_kind == "last":
        w = draw(st.integers(0, 6))
        dow_text, dow = f"L{w}", ("last", w)
    else:
        weekdays = draw(st.lists(st.integers(0, 6), min_size=1, max_size=3, unique=True))
        dow_text, dow = ",".join(map(str, sorted(weekdays))), ("plain", frozenset(weekdays))
    return dom_text, dow_text, dom, dow


@settings(max_examples=150, deadline=None)
@given(fields=_day_fields(), year=st.integers(1971, 2098), month=st.integers(1, 12))
def test_the_days_fired_are_the_days_either_field_matches(
    fields: tuple[str, str, tuple[str, object], tuple[str, object]], year: int, month: int
) -> None:
    dom_text, dow_text, dom, dow = fields
    schedule = CronSchedule(f"0 12 {dom_text} * {dow_text}")
    start = datetime(year, month, 1, tzinfo=UTC)
    end = start + timedelta(days=100)
    fired = [t.date() for t in schedule.fire_times(start - timedelta(seconds=1), until=end)]
    expected = []
    day = start.date()
    while day < end.date():
        if _matches(day, dom, dow):
            expected.append(day)
        day += timedelta(days=1)
    assert fired == expected
    backward = [t.date() for t in schedule.fire_times_reversed(end, since=start)]
    assert backward == expected[::-1]
