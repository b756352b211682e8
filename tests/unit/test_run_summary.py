"""`runs list`'s duration and short error (presentation.duration_seconds, error_summary)."""

from datetime import UTC, datetime, timedelta

import pytest

from scheduler_daemon.presentation import ERROR_SUMMARY_CHARS, duration_seconds, error_summary

START = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)


def test_duration_is_finished_minus_started_to_the_millisecond() -> None:
    assert duration_seconds(START, START + timedelta(seconds=2, microseconds=345_678)) == 2.346


@pytest.mark.parametrize(("started", "finished"), [(START, None), (None, START), (None, None)])
def test_duration_is_none_while_running_or_never_started(started, finished) -> None:
    assert duration_seconds(started, finished) is None


@pytest.mark.parametrize(
    ("status", "exit_code", "http_status", "error", "expected"),
    [
        ("failed", 3, None, "exit code 3", "exit code 3"),
        ("failed", -9, None, "killed", "signal 9"),
        ("failed", None, 500, "HTTP 500", "HTTP 500"),
        ("failed", None, 404, None, "HTTP 404"),
        ("failed", None, None, "RuntimeError: boom", "RuntimeError: boom"),
        ("failed", None, None, "RuntimeError: boom\nTraceback ...", "RuntimeError: boom…"),
        ("failed", None, None, "  \n", None),
        ("failed", None, None, None, None),
        ("failed", 0, 200, "ValueError: bad", "ValueError: bad"),
        ("timeout", -15, None, "timed out after 5 s", "timed out after 5 s"),
        ("timeout", -15, None, None, "signal 15"),
        ("cancelled", None, None, "cancelled by root@vm", "cancelled by root@vm"),
        ("success", 0, 200, None, None),
        ("success", 0, None, "ignored", None),
        ("running", None, None, None, None),
        ("queued", None, None, None, None),
    ],
)
def test_error_summary_says_why_in_a_few_words(
    status, exit_code, http_status, error, expected
) -> None:
    assert error_summary(status, exit_code, http_status, error) == expected


def test_a_long_error_line_is_cut_with_an_ellipsis() -> None:
    long = "KeyError: " + "x" * 200
    summary = error_summary("failed", None, None, long)
    assert summary is not None
    assert len(summary) == ERROR_SUMMARY_CHARS
    assert summary.endswith("…")
    assert long.startswith(summary[:-1])
