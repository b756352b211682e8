"""The console's pure parts: a schedule in words, the DST notes among next firings, the run
chart's geometry (no server, no database; the guard's rules: test_console_guard.py)."""

from datetime import UTC, datetime, timedelta

import pytest

from scheduler_daemon.console.chart import HEIGHT, PAD, Point, chart
from scheduler_daemon.domain.schedule.cron import CronSchedule
from scheduler_daemon.domain.schedule.words import cron_words, dst_notes


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("* * * * *", "every minute (UTC)"),
        ("*/5 * * * *", "every 5 minutes (UTC)"),
        ("15 * * * *", "at minute 15 of every hour (UTC)"),
        ("0 */2 * * *", "at minute 0, every 2 hours (UTC)"),
        ("30 9 * * *", "at 09:30 every day (UTC)"),
        ("0 2 * * 1", "at 02:00 on Monday (UTC)"),
        ("0 2 * * 7", "at 02:00 on Sunday (UTC)"),
        (
            "0 2 1 * *",
            "cron 0 2 1 * *: minute 0, hour 2, day of month 1, month *, day of week * (UTC)",
        ),
    ],
)
def test_a_cron_expression_in_words(expression: str, words: str) -> None:
    assert cron_words(expression, "UTC") == words


def test_a_dst_change_among_the_next_firings_is_noted() -> None:
    zone = "Europe/Berlin"
    schedule = CronSchedule("30 2 * * *", zone)  # 02:30 does not exist on 2026-03-29
    start = datetime(2026, 3, 27, tzinfo=UTC)
    firings = list(schedule.fire_times(start, limit=4))
    notes = dst_notes(firings, zone)
    assert len(notes) == 1
    assert notes[0].startswith("Europe/Berlin changes its UTC offset from +01:00 to +02:00")
    assert dst_notes(firings[:2], zone) == []


def test_the_chart_draws_durations_as_bars_and_lag_as_a_line_oldest_first() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    newest_first = [
        Point(2, at + timedelta(minutes=1), at + timedelta(minutes=1, seconds=4), None),
        Point(1, at, at + timedelta(seconds=2), at + timedelta(seconds=12)),
    ]
    drawn = chart(newest_first)
    assert drawn is not None
    assert [b.title for b in drawn.bars] == [
        "run 1: 10.000 s, started 2.000 s late",
        "run 2: 0.000 s, started 4.000 s late",  # still running
    ]
    assert drawn.bars[0].height == HEIGHT - 2 * PAD  # the longest fills the height
    assert (drawn.max_duration, drawn.max_lag) == (10.0, 4.0)
    assert len(drawn.lag_points.split()) == 2
    assert chart([]) is None
