"""An iCalendar file read in a child process (scheduler_daemon.ics_reader, ADR 0025): its dates
come back as from_ics gives them, its refusals as one line, and a file whose rules keep the
parser busy past the deadline, or past the memory limit, is refused in one line too."""

import time
from datetime import date
from pathlib import Path

import pytest

from scheduler_daemon.domain.calendar import InvalidCalendar, from_ics
from scheduler_daemon.ics_reader import read_ics

FIXTURES = Path(__file__).parents[1] / "fixtures"
TODAY = date(2026, 12, 7)


def _never_matching(events: int) -> bytes:
    """Daily rules for 30 February, their DTSTART excluded: dateutil steps each to the year 9999
    without yielding (seconds per rule), which no check before expansion can see."""
    body = "".join(
        f"BEGIN:VEVENT\r\nUID:n{i}\r\nDTSTART;VALUE=DATE:20200101\r\n"
        "EXDATE;VALUE=DATE:20200101\r\nRRULE:FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30\r\nEND:VEVENT\r\n"
        for i in range(events)
    )
    return f"BEGIN:VCALENDAR\r\nVERSION:2.0\r\n{body}END:VCALENDAR\r\n".encode()


def test_the_child_gives_the_dates_from_ics_gives() -> None:
    data = (FIXTURES / "weekly_maintenance.ics").read_bytes()
    assert read_ics(data, TODAY) == from_ics(data, TODAY)


def test_the_childs_refusal_is_the_same_one_line() -> None:
    data = (FIXTURES / "not_a_calendar.ics").read_bytes()
    with pytest.raises(InvalidCalendar) as direct:
        from_ics(data, TODAY)
    with pytest.raises(InvalidCalendar) as child:
        read_ics(data, TODAY)
    assert str(child.value) == str(direct.value)


def test_a_file_that_keeps_the_parser_busy_past_the_deadline_is_refused_in_one_line() -> None:
    began = time.monotonic()
    with pytest.raises(InvalidCalendar) as caught:
        read_ics(_never_matching(20), TODAY, seconds=1)
    assert time.monotonic() - began < 10  # killed at 1 s, not left to step to the year 9999
    assert str(caught.value).startswith("the iCalendar file took more than 1 s to read")


def test_a_file_that_needs_more_memory_than_the_limit_is_refused_in_one_line() -> None:
    """10,000 one-day events (about 1 MiB, the largest file taken) need about 64 MiB to parse:
    read under the default limit, refused under 40 MiB by the child's RLIMIT_AS."""
    body = "".join(
        f"BEGIN:VEVENT\r\nUID:d{i}\r\nDTSTART;VALUE=DATE:{20270101 + i % 28}\r\nEND:VEVENT\r\n"
        for i in range(10_000)
    )
    data = f"BEGIN:VCALENDAR\r\nVERSION:2.0\r\n{body}END:VCALENDAR\r\n".encode()
    assert len(read_ics(data, TODAY, seconds=120).days) == 28  # no deadline in question here
    with pytest.raises(InvalidCalendar) as caught:
        read_ics(data, TODAY, seconds=120, memory=40 * 2**20)
    assert str(caught.value) == "the iCalendar file needs more than 40 MiB to read"


def test_a_memory_error_the_child_could_not_catch_is_the_same_one_line() -> None:
    """Under a limit below what the child already holds, the MemoryError comes from reading
    stdin, outside main()'s try (or, under load, from a finalizer: the clean-clone CI run of
    2026-12-07 printed "exited with 1: MemoryErrorException ignored in sys.unraisablehook").
    The parent reads it from the child's stderr; before this test it said "could not be read
    (its reader exited with 1: MemoryError)"."""
    data = (FIXTURES / "weekly_maintenance.ics").read_bytes()
    with pytest.raises(InvalidCalendar) as caught:
        read_ics(data, TODAY, seconds=120, memory=2**20)
    assert str(caught.value) == "the iCalendar file needs more than 1 MiB to read"
