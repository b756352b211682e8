"""Durations as operators type them: parse `30s`, `0.5s`, `1h30m`, `90` or ISO 8601 `PT30S`,
and print them.

The compact form is a sequence of `<number><unit>` parts, largest unit first, each unit at most
once: `d`, `h`, `m`, `s`, `ms`, `us`; a number may carry a decimal fraction (`1.5h`, `0.25s`).
A bare number is seconds, as systemd reads it (`10`, `0.5`). The ISO 8601 form accepts weeks,
days, hours, minutes and seconds (seconds may carry up to six fractional digits); years and months
are refused because they have no fixed length. A duration is a whole number of microseconds: a
value finer than that (`0.5us`, `1.0000001s`) is refused, so is a negative one, and zero unless
the option gives it a meaning (`allow_zero`). `format_duration` prints the compact form, and
`parse_duration(format_duration(d)) == d` for every positive `timedelta`.
"""

import re
from datetime import timedelta
from fractions import Fraction

_UNITS = (
    ("d", timedelta(days=1)),
    ("h", timedelta(hours=1)),
    ("m", timedelta(minutes=1)),
    ("s", timedelta(seconds=1)),
    ("ms", timedelta(milliseconds=1)),
    ("us", timedelta(microseconds=1)),
)
_UNIT_RANK = {name: rank for rank, (name, _) in enumerate(_UNITS)}
_NUMBER = r"(?:\d+(?:\.\d+)?|\.\d+)"
# re.ASCII: digits are 0-9 only (`٣s` is not a duration).
_COMPACT_PART = re.compile(rf"({_NUMBER})(ms|us|d|h|m|s)", re.ASCII)
_BARE_SECONDS = re.compile(_NUMBER, re.ASCII)
_ISO = re.compile(
    r"P(?:(?P<w>\d+)W)?(?:(?P<d>\d+)D)?"
    r"(?:T(?=\d)(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+)(?:[.,](?P<f>\d{1,6}))?S)?)?",
    re.ASCII,
)
_MICROSECOND = timedelta(microseconds=1)
_MAX_MICROSECONDS = timedelta.max // _MICROSECOND


def parse_duration(text: str, *, allow_zero: bool = False) -> timedelta:
    """Parse a positive duration (or zero, with `allow_zero`); raise ValueError with a one-line
    message otherwise."""
    body = text.strip()
    negative = body.startswith("-")
    if body.startswith(("+", "-")):
        body = body[1:]
    try:
        if body.startswith(("P", "p")):
            micros = Fraction(_parse_iso(text, body.upper()) // _MICROSECOND)
        elif _BARE_SECONDS.fullmatch(body):
            micros = Fraction(body) * 1_000_000
        else:
            micros = _parse_compact(text, body.lower())
    except OverflowError:
        raise ValueError(f"duration too large: {text!r}") from None
    if negative and micros:
        raise ValueError(f"duration must not be negative: {text!r}")
    if micros == 0:
        if allow_zero:
            return timedelta(0)
        raise ValueError(f"duration must be positive: {text!r}")
    if micros < 1:
        raise ValueError(f"duration under 1us: {text!r}")
    if micros.denominator != 1:
        raise ValueError(f"duration finer than 1us: {text!r}")
    if micros > _MAX_MICROSECONDS:
        raise ValueError(f"duration too large: {text!r}")
    return timedelta(microseconds=int(micros))


def format_duration(td: timedelta) -> str:
    """Print `td` in the compact form, e.g. `1h30m`, `30s`, `1d2h`, `500ms`; zero prints as `0s`."""
    if td < timedelta(0):
        return "-" + format_duration(-td)
    if td == timedelta(0):
        return "0s"
    rest = td // _MICROSECOND
    parts = []
    for name, unit in _UNITS:
        count, rest = divmod(rest, unit // _MICROSECOND)
        if count:
            parts.append(f"{count}{name}")
    return "".join(parts)


def _parse_compact(text: str, body: str) -> Fraction:
    """The compact form's value in microseconds (exact: fractions are kept as they were typed)."""
    total = Fraction(0)
    position = 0
    last_rank = -1
    for match in _COMPACT_PART.finditer(body):
        rank = _UNIT_RANK[match.group(2)]
        if match.start() != position or rank <= last_rank:
            raise _invalid(text)
        total += Fraction(match.group(1)) * (_UNITS[rank][1] // _MICROSECOND)
        position = match.end()
        last_rank = rank
    if position == 0 or position != len(body):
        raise _invalid(text)
    return total


def _parse_iso(text: str, body: str) -> timedelta:
    date_part = body[1:].split("T", 1)[0]
    if "Y" in date_part or "M" in date_part:
        raise ValueError(
            f"invalid duration {text!r}: years and months have no fixed length;"
            " use days such as P30D"
        )
    match = _ISO.fullmatch(body)
    if match is None or body in ("P", "PT"):
        raise _invalid(text)
    parts = match.groupdict()
    total = timedelta(0)
    for key, unit in (
        ("w", timedelta(weeks=1)),
        ("d", timedelta(days=1)),
        ("h", timedelta(hours=1)),
    ):
        if parts[key]:
            total += int(parts[key]) * unit
    if parts["m"]:
        total += int(parts["m"]) * timedelta(minutes=1)
    if parts["s"]:
        total += int(parts["s"]) * timedelta(seconds=1)
    if parts["f"]:
        total += timedelta(microseconds=int(parts["f"].ljust(6, "0")))
    return total


def _invalid(text: str) -> ValueError:
    return ValueError(
        f"invalid duration {text!r}: use 30s, 0.5s, 1h30m, seconds such as 90, or ISO 8601 such as"
        " PT30S"
    )
