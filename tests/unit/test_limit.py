"""The input bounds (domain/limit.py), the task rules and task-file reading that apply them, and
docs/cli.md's table of them."""

import math
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from scheduler_daemon.cli.output import cell, printable
from scheduler_daemon.domain import argument, json_text, limit, task_file
from scheduler_daemon.domain.argument import InvalidArgument
from scheduler_daemon.domain.limit import OutOfBounds
from scheduler_daemon.domain.task import InvalidTask, TaskSpec

DOCS = Path(__file__).parents[2] / "docs" / "cli.md"
SPEC = TaskSpec(name="t", executor="shell", target="true", every=timedelta(minutes=1))


def _limits_table() -> dict[str, str]:
    section = DOCS.read_text().split("\n## Limits\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| ")]
    return {value.strip(): bound.strip() for value, bound in rows[1:]}


def test_the_docs_table_of_limits_states_the_constants() -> None:
    table = _limits_table()
    assert table["`config set max-concurrent-runs`"] == f"1 to {limit.MAX_CONCURRENT_RUNS:,}"
    durations = next(v for k, v in table.items() if k.startswith("every duration"))
    assert f"({limit.MAX_DURATION.days:,} days)" in durations
    assert timedelta(milliseconds=1) == limit.MIN_DURATION
    assert "at least 1 ms" in durations
    assert table["task names, `--concurrency-key`"].startswith(f"1 to {limit.MAX_NAME_LENGTH} ")
    assert table["`--cron`, `--timezone`"].startswith(f"at most {limit.MAX_CRON_LENGTH:,} ")
    assert table["`tasks apply --source`"].startswith(f"1 to {limit.MAX_SOURCE_LENGTH:,} ")
    payload = next(v for k, v in table.items() if k.startswith("payload"))
    assert payload.startswith(f"at most {limit.MAX_PAYLOAD_BYTES // 1024} KiB")
    ints = table["`--max-attempts`, `--catchup-limit`, `--limit`"]
    assert ints.startswith(f"1 to {limit.INT4_MAX:,} ")
    assert table["`tasks next -n`"] == f"1 to {limit.MAX_NEXT_COUNT:,}"
    assert table["`tasks trigger --count`"] == f"1 to {limit.MAX_TRIGGER_COUNT:,}"
    args = table["`tasks trigger --arg`, `--args-json`"]
    assert args.startswith(f"a JSON object of at most {limit.MAX_ARGS_BYTES // 1024} KiB ")
    assert f"nested at most {json_text.MAX_DEPTH} levels" in args
    file = table["a task file"]
    assert file.startswith(f"at most {limit.MAX_TASK_FILE_BYTES // 2**20} MiB")
    assert f"at most {limit.MAX_TASK_FILE_DEPTH} tables" in file
    assert table["`tasks health --window`"] == f"at most {limit.MAX_HEALTH_WINDOW.days} days"
    assert table["`tasks health --failing-after`"] == f"1 to {limit.MAX_FAILING_AFTER}"
    notify = table["`--notify` URL, `config set notify-url`"]
    assert notify.startswith(f"at most {limit.MAX_URL_BYTES // 1024} KiB")
    url = next(v for k, v in table.items() if k.startswith("an http URL"))
    assert url.startswith("http:// or https://, read whole by `urllib.parse.urlsplit`")
    assert "a port of 1 to 65,535" in url
    headers = next(v for k, v in table.items() if k.startswith("notify headers"))
    assert headers.startswith(f"at most {limit.MAX_PAYLOAD_BYTES // 1024} KiB")
    dates = table["a calendar's dates (`calendars add`)"]
    assert dates == f"at most {limit.MAX_CALENDAR_DATES:,} distinct dates"
    calendars = table["`--exclude-calendar`"]
    assert calendars.startswith(f"at most {limit.MAX_TASK_CALENDARS} calendars on a task")
    ics = table["`calendars add --ics`"]
    assert ics.startswith(
        f"a file of at most {limit.MAX_ICS_BYTES // 1024:,} KiB, its events occurring at most "
        f"{limit.MAX_ICS_OCCURRENCES:,} times over the dates it is read over, and on at least "
        "one date; each rule `FREQ=DAILY` or longer"
    )
    assert f"at most {limit.MAX_ICS_RULE_STEPS:,} steps from its `DTSTART`" in ics
    assert ics.endswith(
        f"stopped past {limit.ICS_READ_SECONDS:g} s or {limit.ICS_READ_MEMORY // 2**20} MiB"
    )
    assert len(table) == 20  # a new bound gets a row, and a check here


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "must be at least 1"),
        (2**31, "must be at most 2,147,483,647"),
        (True, "whole number"),
        (1.5, "whole number"),
    ],
)
def test_a_whole_number_outside_int4_is_refused(value, message) -> None:
    with pytest.raises(OutOfBounds, match=message):
        limit.whole("--max-attempts", value)


@pytest.mark.parametrize(
    ("value", "allow_zero", "message"),
    [
        (timedelta(0), False, "must be positive"),
        (timedelta(seconds=-1), True, "must not be negative"),
        (timedelta(microseconds=999), False, "at least 1ms, got 999us"),
        (timedelta(days=36_526), False, "at most 100 years"),
    ],
)
def test_a_duration_outside_1ms_to_100_years_is_refused(value, allow_zero, message) -> None:
    with pytest.raises(OutOfBounds, match=message):
        limit.duration("--every", value, allow_zero=allow_zero)


def test_the_duration_bounds_themselves_are_accepted() -> None:
    for value in (limit.MIN_DURATION, limit.MAX_DURATION):
        assert limit.duration("--every", value) == value
    assert limit.duration("--backoff", timedelta(0), allow_zero=True) == timedelta(0)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (math.nan, "finite"),
        (math.inf, "finite"),
        (-math.inf, "finite"),
        (1e20, "at most 100 years"),
        (2**70, "at most 100 years"),
        (1e-9, "at least 1ms"),
        (-1, "must not be negative"),
    ],
)
def test_a_number_of_seconds_is_bounded_before_it_is_converted(value, message) -> None:
    with pytest.raises(OutOfBounds, match=message):
        limit.seconds("every", value)


@pytest.mark.parametrize(
    "value", ["", "x" * 201, "a\x00b", "a\x1bb", "a\nb", "a\u200bb", "a\u202eb", "a\ud800b"]
)
def test_a_name_is_1_to_200_characters_without_control_or_format_characters(value) -> None:
    with pytest.raises(OutOfBounds):
        limit.name("task name", value)
    with pytest.raises(InvalidTask):
        TaskSpec(**{**SPEC.__dict__, "name": value}).validate()
    with pytest.raises(InvalidTask):
        TaskSpec(**{**SPEC.__dict__, "concurrency_key": value}).validate()


@pytest.mark.parametrize("value", ["x" * 200, "ünïcödé", "名前", "a-b_c.d e"])
def test_a_name_within_its_bound_is_accepted(value) -> None:
    assert limit.name("task name", value) == value
    TaskSpec(**{**SPEC.__dict__, "name": value, "concurrency_key": value}).validate()


def test_a_target_may_hold_newlines_and_tabs_but_not_nul() -> None:
    TaskSpec(**{**SPEC.__dict__, "target": "echo a\n\techo b"}).validate()
    with pytest.raises(InvalidTask, match="U\\+0000"):
        TaskSpec(**{**SPEC.__dict__, "target": "tr\x00ue"}).validate()


@pytest.mark.parametrize(
    ("at", "message"),
    [
        (datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC) + timedelta(0), "too far ahead"),
        (datetime.fromisoformat("9999-12-31T23:59:59-14:00"), "out of range"),
        (datetime.fromisoformat("0001-01-01T00:00:00+14:00"), "out of range"),
    ],
)
def test_an_at_that_no_bounded_duration_can_be_added_to_is_refused(at, message) -> None:
    spec = TaskSpec(name="t", executor="shell", target="true", at=at)
    with pytest.raises(InvalidTask, match=message):
        spec.validate()


def test_an_at_more_than_100_years_after_now_is_refused() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    spec = TaskSpec(name="t", executor="shell", target="true", at=now + limit.MAX_DURATION)
    spec.validate(now)
    with pytest.raises(InvalidTask, match="at most 100 years after now"):
        spec.with_changes(at=now + limit.MAX_DURATION + timedelta(seconds=1)).validate(now)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2147483648", "at most 100,000"),
        ("100001", "at most 100,000"),
        ("0", "whole number of at least 1"),
        ("²", "whole number"),
        ("٣", "whole number"),
        (" 5", "whole number"),
    ],
)
def test_max_concurrent_runs_is_1_to_100000_in_digits_0_to_9(value, message) -> None:
    with pytest.raises(InvalidArgument, match=message):
        argument.fleet_setting("max-concurrent-runs", value)


@pytest.mark.parametrize(
    ("ref", "found"),
    [
        ("12", 12),
        (12, 12),
        ("name", "name"),
        (str(2**63), None),
        (2**63, None),
        (0, None),
        ("²", None),
        ("٣", None),
        ("a\x00b", None),
        ("a\ud800", None),
        ("a\x01b", "a\x01b"),  # a name made before names were bounded can still be found
    ],
)
def test_a_task_ref_no_task_can_have_is_none(ref, found) -> None:
    assert argument.task_ref(ref) == found


def test_a_task_file_with_a_byte_order_mark_is_read() -> None:
    text = task_file.decode(b'\xef\xbb\xbf[t]\ncommand = "true"\nevery = "1m"\n')
    assert list(task_file.parse(text, {})) == ["t"]
    assert list(task_file.parse("\ufeff" + text, {})) == ["t"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff", "not UTF-8: byte 0xff at offset 0"),
        (b"a = '\xed\xa0\x80'", "not UTF-8"),  # an encoded surrogate
        (b"#" * (limit.MAX_TASK_FILE_BYTES + 1), "larger than 10 MiB"),
    ],
)
def test_a_task_file_that_is_not_bounded_utf8_is_refused(data, message) -> None:
    with pytest.raises(InvalidTask, match=message):
        task_file.decode(data)


@pytest.mark.parametrize("depth", [101, 5000])
def test_a_task_file_nested_past_100_is_refused(depth) -> None:
    with pytest.raises(InvalidTask, match="nested more than 100"):
        task_file.parse("x = " + "[" * depth + "]" * depth, {})


def test_a_task_file_nested_100_deep_gets_to_its_field_checks() -> None:
    body = '[t]\ncommand = "true"\nevery = "1m"\nx = ' + "[" * 98 + "]" * 98
    with pytest.raises(InvalidTask, match="field 'x': unknown field"):
        task_file.parse(body, {})


def test_text_output_escapes_control_and_format_characters_but_keeps_layout() -> None:
    assert printable("ok\n\tnext") == "ok\n\tnext"
    assert printable("\x1b[2J\r\x07\u202e\x00") == "\\x1b[2J\\r\\x07\\u202e\\x00"
    assert printable("名前 ünï") == "名前 ünï"
    assert cell("a\nb\tc") == "a\\nb\\tc"
    assert cell(None) == ""


def test_durations_read_digits_0_to_9_only() -> None:
    from scheduler_daemon.domain.duration import parse_duration

    for text in ("٣", "٣s", "PT٣S"):
        with pytest.raises(ValueError, match="invalid duration"):
            parse_duration(text)
    assert re.fullmatch(r"\d", "٣")  # what \d would have matched without re.ASCII


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://[::1/hook", "is not a valid URL (Invalid IPv6 URL)"),
        ("http://a b/h", "must not contain whitespace or a control character (U+0020)"),
        ("http://h\x1b/h", "(U+001B)"),
        ("http://h:99999/h", "is not a valid URL (Port out of range 0-65535)"),
        ("http://h:0/h", "needs a port of 1 to 65535"),
        ("http://h:x/h", "is not a valid URL (Port could not be cast"),
        ("http://user@/h", "needs a host"),
        ("HTTP://h/", "needs an http:// or https:// URL"),
    ],
)
def test_an_http_url_is_held_to_what_its_parse_needs(url: str, reason: str) -> None:
    """The issue's three (`http://[::1/hook`, a space, port 99999) passed the old prefix check
    (`^https?://[^\\s/]+` ) and raised later, in the daemon's launch pass."""
    with pytest.raises(OutOfBounds, match=re.escape(reason)) as caught:
        limit.http_url("--http", url)
    assert "\n" not in str(caught.value)


def test_an_http_url_with_its_password_is_refused_without_showing_it() -> None:
    with pytest.raises(OutOfBounds) as caught:
        limit.http_url("--http", "https://u:hunter2@h:99999/")
    assert "hunter2" not in str(caught.value)
    assert (
        limit.http_url("--http", "https://u:hunter2@[::1]:443/h") == "https://u:hunter2@[::1]:443/h"
    )
