"""Parsing and printing durations as operators type them."""

from datetime import timedelta

import pytest

from scheduler_daemon.domain.duration import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2d", timedelta(days=2)),
        ("1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        ("500ms", timedelta(milliseconds=500)),
        ("1s250us", timedelta(seconds=1, microseconds=250)),
        (" 1H ", timedelta(hours=1)),
        ("+10s", timedelta(seconds=10)),
        ("0.5s", timedelta(milliseconds=500)),
        (".5s", timedelta(milliseconds=500)),
        ("1.5h", timedelta(hours=1, minutes=30)),
        ("1.5h30m", timedelta(hours=2)),
        ("0.25d", timedelta(hours=6)),
        ("1.5ms", timedelta(microseconds=1500)),
        ("0.001ms", timedelta(microseconds=1)),
        ("1us", timedelta(microseconds=1)),
        ("2.000000s", timedelta(seconds=2)),
    ],
)
def test_compact_durations_parse_to_their_timedelta(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PT30S", timedelta(seconds=30)),
        ("PT1H30M", timedelta(hours=1, minutes=30)),
        ("P1D", timedelta(days=1)),
        ("P1DT2H", timedelta(days=1, hours=2)),
        ("PT0.5S", timedelta(milliseconds=500)),
        ("PT1,25S", timedelta(seconds=1, milliseconds=250)),
        ("P2W", timedelta(weeks=2)),
        ("pt5m", timedelta(minutes=5)),
    ],
)
def test_iso_8601_durations_parse_to_their_timedelta(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10", timedelta(seconds=10)),
        ("0.5", timedelta(milliseconds=500)),
        (".25", timedelta(milliseconds=250)),
        (" 90 ", timedelta(seconds=90)),
        ("+3", timedelta(seconds=3)),
        ("0.000001", timedelta(microseconds=1)),
        ("86400", timedelta(days=1)),
    ],
)
def test_a_bare_number_is_seconds_as_systemd_reads_it(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["0s", "PT0S", "0ms", "0", "0.0", "0h0m", "-0s"])
def test_zero_is_refused_as_not_positive(text: str) -> None:
    with pytest.raises(ValueError, match=r"^duration must be positive: ") as caught:
        parse_duration(text)
    assert str(caught.value) == f"duration must be positive: {text!r}"


@pytest.mark.parametrize("text", ["0s", "PT0S", "0ms", "0", "0.0", "0h0m"])
def test_zero_is_accepted_where_the_option_allows_it(text: str) -> None:
    assert parse_duration(text, allow_zero=True) == timedelta(0)


@pytest.mark.parametrize("text", ["-5m", "-PT5M", "-5", "-0.5s", "-1h30m", "-1us"])
def test_negative_durations_are_refused_even_where_zero_is_allowed(text: str) -> None:
    for allow_zero in (False, True):
        with pytest.raises(ValueError, match=r"^duration must not be negative: ") as caught:
            parse_duration(text, allow_zero=allow_zero)
        assert str(caught.value) == f"duration must not be negative: {text!r}"


@pytest.mark.parametrize("text", ["0.5us", "0.0000001", "0.0001ms", "0.9us"])
def test_a_duration_under_a_microsecond_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"^duration under 1us: ") as caught:
        parse_duration(text, allow_zero=True)
    assert str(caught.value) == f"duration under 1us: {text!r}"


@pytest.mark.parametrize("text", ["1.0000001s", "1.5us", "0.0000015", "1ms0.5us"])
def test_a_duration_that_is_not_a_whole_number_of_microseconds_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"^duration finer than 1us: ") as caught:
        parse_duration(text)
    assert str(caught.value) == f"duration finer than 1us: {text!r}"


@pytest.mark.parametrize(
    "text",
    [
        "abc",
        "",
        "5.",
        "1.5.5s",
        "1h1h",
        "30m1h",
        "1 h",
        "1,5h",
        "PT",
        "P",
        "PT1.1234567S",
        "P1DT",
        "1e3",
        "1e3s",
        "s",
        "--5s",
        "0x10",
        "1h 30m",
    ],
)
def test_garbage_is_refused_with_the_accepted_forms_in_one_line(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration") as caught:
        parse_duration(text)
    assert str(caught.value) == (
        f"invalid duration {text!r}: use 30s, 0.5s, 1h30m, seconds such as 90, or ISO 8601 such"
        " as PT30S"
    )


@pytest.mark.parametrize("text", ["P1Y", "P1M", "P1Y2M3DT4H"])
def test_iso_years_and_months_are_refused_because_they_have_no_fixed_length(text: str) -> None:
    with pytest.raises(ValueError, match="years and months have no fixed length"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["99999999999d", "99999999999999999999", "P99999999999W"])
def test_a_duration_too_large_for_timedelta_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(ValueError, match=r"^duration too large: ") as caught:
        parse_duration(text)
    assert str(caught.value) == f"duration too large: {text!r}"


@pytest.mark.parametrize(
    ("td", "text"),
    [
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(seconds=30), "30s"),
        (timedelta(days=1, hours=2), "1d2h"),
        (timedelta(milliseconds=500), "500ms"),
        (timedelta(microseconds=1500), "1ms500us"),
        (timedelta(0), "0s"),
        (-timedelta(minutes=5), "-5m"),
    ],
)
def test_format_duration_prints_the_compact_form(td: timedelta, text: str) -> None:
    assert format_duration(td) == text


@pytest.mark.parametrize(
    "td",
    [
        timedelta(microseconds=1),
        timedelta(days=3, hours=23, minutes=59, seconds=59, microseconds=999_999),
        timedelta(days=999_999_999),
        timedelta(weeks=2, milliseconds=7),
    ],
)
def test_format_and_parse_round_trip(td: timedelta) -> None:
    assert parse_duration(format_duration(td)) == td
