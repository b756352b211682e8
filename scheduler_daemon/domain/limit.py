"""The bounds every value has where it enters, whether through the CLI, the Python API or a task
file, and the checks that apply them (pure). docs/cli.md "Limits" is the table of them, and
tests/unit/test_limit.py holds the table to these constants.

A value inside its bound is one the daemons can store, plan and act on: a count that fits the
column it is written to, a duration whose sum with any timestamp stays a timestamp, a name that
fits an index entry and prints as one line. Each check raises OutOfBounds with a one-line
message; task.py and argument.py raise it as their own error (exit code 2 in the CLI).
"""

import math
import unicodedata
import urllib.parse
from datetime import timedelta

from scheduler_daemon.domain.secret import redact

INT4_MAX = 2**31 - 1
"""The largest value of a PostgreSQL `integer` (max-attempts, catchup-limit, counts)."""
INT8_MAX = 2**63 - 1
"""The largest value of a PostgreSQL `bigint` (task, occurrence and run ids)."""
MAX_CONCURRENT_RUNS = 100_000
MAX_DURATION = timedelta(days=36_525)  # 100 years
MIN_DURATION = timedelta(milliseconds=1)  # the shortest non-zero duration
MAX_NAME_LENGTH = 200  # task names and concurrency keys, in characters
MAX_CRON_LENGTH = 1_000
MAX_SOURCE_LENGTH = 4_096  # a `tasks apply --source` (a file's absolute path by default)
MAX_PAYLOAD_BYTES = 64 * 1024  # the target and headers, as JSON
MAX_URL_BYTES = 8 * 1024  # a notify URL (UTF-8); an http task's URL is inside its payload
MAX_NEXT_COUNT = 10_000  # `tasks next -n`
MAX_TRIGGER_COUNT = 100_000  # `tasks trigger --count`
MAX_ARGS_BYTES = 64 * 1024  # `tasks trigger --arg/--args-json`, as compact JSON (UTF-8)
MAX_HEALTH_WINDOW = timedelta(days=31)  # `tasks health --window`: a window walks its index range
MAX_FAILING_AFTER = 100  # `tasks health --failing-after`: the newest outcomes read for it
MAX_TASK_FILE_BYTES = 10 * 1024 * 1024
MAX_TASK_FILE_DEPTH = 100  # nested tables and arrays in a task file
MAX_CALENDAR_DATES = 10_000  # the excluded dates one calendar holds (ADR 0025)
MAX_TASK_CALENDARS = 16  # `--exclude-calendar` names on one task
MAX_ICS_BYTES = 1024 * 1024  # `calendars add --ics`
MAX_ICS_OCCURRENCES = 20_000  # the event occurrences an --ics file is expanded to, at most
MAX_ICS_RULE_STEPS = 100_000  # an RRULE's steps from its DTSTART to the end of the dates read
ICS_READ_SECONDS = 30.0  # an --ics file is read in a child process killed past this
ICS_READ_MEMORY = 512 * 2**20  # and limited to this address space (RLIMIT_AS)

# Characters no name or key may hold: control (Cc: NUL, ESC, newline, DEL...), format (Cf:
# zero-width and bidirectional marks) and surrogates (Cs: not encodable as UTF-8).
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs"})


class OutOfBounds(ValueError):
    """A value outside its bound; the message is one line, fit for the CLI."""


def whole(label: str, value: int, *, least: int = 1, most: int = INT4_MAX) -> int:
    """A whole number in [least, most]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise OutOfBounds(f"{label} must be a whole number")
    if value < least:
        raise OutOfBounds(f"{label} must be at least {least:,}")
    if value > most:
        raise OutOfBounds(f"{label} must be at most {most:,}, got {value}")
    return value


def duration(label: str, value: timedelta, *, allow_zero: bool = False) -> timedelta:
    """A duration of at least 1 ms (or zero, with `allow_zero`) and at most 100 years."""
    if not isinstance(value, timedelta):
        raise OutOfBounds(f"{label} must be a duration")
    if value == timedelta(0) and allow_zero:
        return value
    if value <= timedelta(0):
        raise OutOfBounds(
            f"{label} must not be negative" if allow_zero else f"{label} must be positive"
        )
    if value < MIN_DURATION:
        raise OutOfBounds(f"{label} must be at least 1ms, got {_micros(value)}us")
    if value > MAX_DURATION:
        raise OutOfBounds(f"{label} must be at most 100 years ({MAX_DURATION.days:,}d)")
    return value


def seconds(label: str, value: float, *, allow_zero: bool = False) -> timedelta:
    """A number of seconds (a task file's `every = 90`) as a bounded duration: NaN, infinities
    and values past 100 years are refused before any conversion could fail."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise OutOfBounds(f"{label} must be a finite number of seconds, got {value!r}")
    if value < 0:
        raise OutOfBounds(f"{label} must not be negative")
    if value > MAX_DURATION.total_seconds():
        raise OutOfBounds(f"{label} must be at most 100 years ({MAX_DURATION.days:,}d)")
    if 0 < value < MIN_DURATION.total_seconds():
        raise OutOfBounds(f"{label} must be at least 1ms, got {value!r} s")
    return duration(label, timedelta(seconds=value), allow_zero=allow_zero)


def name(label: str, value: str, *, most: int = MAX_NAME_LENGTH) -> str:
    """A name or key: 1 to `most` characters, none of them a control or format character."""
    if not isinstance(value, str):
        raise OutOfBounds(f"{label} must be text")
    if not 0 < len(value) <= most:
        raise OutOfBounds(f"{label} must be 1 to {most:,} characters, got {len(value):,}")
    bad = unprintable(value)
    if bad is not None:
        raise OutOfBounds(f"{label} must not contain the control or format character {bad}")
    return value


def text(label: str, value: str) -> str:
    """Free text the database stores (a command, a URL, a header value): no NUL, which a
    PostgreSQL text or jsonb value cannot hold, and no surrogate, which UTF-8 cannot encode."""
    if not isinstance(value, str):
        raise OutOfBounds(f"{label} must be text")
    for char in value:
        if char == "\0" or unicodedata.category(char) == "Cs":
            raise OutOfBounds(f"{label} must not contain {escape(char)}")
    return value


def url(label: str, value: str) -> str:
    """A URL the database stores apart from a payload (`--notify`, `notify-url`): `text`, and
    at most MAX_URL_BYTES, which every HTTP client and server takes."""
    text(label, value)
    if len(value.encode("utf-8")) > MAX_URL_BYTES:
        raise OutOfBounds(f"{label} is longer than {MAX_URL_BYTES} bytes")
    return value


def http_url(label: str, value: str) -> str:
    """An http(s) URL a daemon will parse and POST to (an http task's target, `--notify`,
    `config set notify-url`), held to what the parse needs, not only to its prefix: no
    whitespace or control character; `urllib.parse.urlsplit` reads it; its scheme is http or
    https; it names a host; its port, when given, is 1 to 65535. `http://[::1/hook` once passed a
    prefix check and raised inside every launch pass (KNOWN-FAILURES 39)."""
    shown = _shown_url(value)
    for char in value:
        if char.isspace() or unicodedata.category(char) in _UNPRINTABLE:
            raise OutOfBounds(
                f"{label} must not contain whitespace or a control character "
                f"({escape(char)}), got '{shown}'"
            )
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port
    except ValueError as exc:  # an unclosed [IPv6], a port out of range or not a number
        raise OutOfBounds(f"{label} is not a valid URL ({exc}), got '{shown}'") from None
    if not value.startswith(("http://", "https://")):  # as the executor and deliverer check
        raise OutOfBounds(f"{label} needs an http:// or https:// URL, got '{shown}'")
    if not parts.hostname:
        raise OutOfBounds(f"{label} needs a host in its URL, got '{shown}'")
    if port == 0:
        raise OutOfBounds(f"{label} needs a port of 1 to 65535, got '{shown}'")
    return value


def _shown_url(value: str) -> str:
    """A URL as an error message shows it: user info masked, at most 80 characters."""
    return redact(value)[:80]


def unprintable(value: str) -> str | None:
    """The first control, format or surrogate character of `value`, escaped (`U+200B`), or
    None."""
    for char in value:
        if unicodedata.category(char) in _UNPRINTABLE:
            return escape(char)
    return None


def escape(char: str) -> str:
    """One character as `U+XXXX`."""
    return f"U+{ord(char):04X}"


def _micros(value: timedelta) -> int:
    return value // timedelta(microseconds=1)
