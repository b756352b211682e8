"""An iCalendar file read into a calendar's dates in a child process, bounded in time and memory
whatever its rules ask of the parsers (ADR 0025, issue 44).

`domain.calendar.from_ics` refuses the rules known to be unbounded work before expanding them;
what remains unbounded lies inside the parsers (dateutil steps a rule that never matches, say
`FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30`, to the year 9999 without yielding: seconds per rule, and a
1 MiB file holds thousands). So `calendars add --ics` runs it here: `read_ics` starts
`python -m scheduler_daemon.ics_reader TODAY MEMORY`, writes the file's bytes to its stdin and
reads the dates back as JSON; the child limits its own address space (RLIMIT_AS), and the parent
kills it past limit.ICS_READ_SECONDS (a legitimate 1 MiB file, 12,000 one-day events,
takes 2 s, up to 10 s on a loaded machine). Either is one line, like any refusal: InvalidCalendar.
"""

import json
import subprocess
import sys
from datetime import date

from scheduler_daemon.domain import limit
from scheduler_daemon.domain.calendar import CalendarDates, InvalidCalendar, from_ics
from scheduler_daemon.domain.status import CalendarSource

MODULE = "scheduler_daemon.ics_reader"


def read_ics(
    data: bytes,
    today: date,
    *,
    seconds: float = limit.ICS_READ_SECONDS,
    memory: int = limit.ICS_READ_MEMORY,
) -> CalendarDates:
    """`from_ics(data, today)` run in a child process: its dates, or InvalidCalendar (one line)
    for a file it refuses, one it could not read within `seconds`, or within `memory` bytes."""
    if len(data) > limit.MAX_ICS_BYTES:
        return from_ics(data, today)  # refused at once, no child needed
    argv = [sys.executable, "-m", MODULE, today.isoformat(), str(memory)]
    try:
        done = subprocess.run(argv, input=data, capture_output=True, timeout=seconds, check=False)
    except subprocess.TimeoutExpired:  # run() killed the child and waited for it
        raise InvalidCalendar(
            f"the iCalendar file took more than {seconds:g} s to read: its rules ask too much "
            "of the parser; give dates, or rules that start nearer today"
        ) from None
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):  # killed, or out of memory before it could answer
        said = done.stderr.decode(errors="replace").strip().splitlines()
        if any("MemoryError" in line for line in said):  # raised where main() could not catch it
            raise InvalidCalendar(_needs_more(memory))
        why = f": {said[-1][:200]}" if said else ""
        raise InvalidCalendar(
            f"the iCalendar file could not be read (its reader exited with {done.returncode}{why})"
        )
    if "error" in answer:
        raise InvalidCalendar(str(answer["error"]))
    return CalendarDates(
        tuple(date.fromisoformat(day) for day in answer["days"]),
        CalendarSource.ICS,
        date.fromisoformat(answer["first"]),
        date.fromisoformat(answer["last"]),
    )


def main(argv: list[str]) -> int:
    """The child: TODAY and MEMORY as arguments, the file on stdin, one JSON object on stdout
    (`days`, `first`, `last`; or `error`, one line)."""
    today, memory = date.fromisoformat(argv[0]), int(argv[1])
    _limit_memory(memory)
    data = sys.stdin.buffer.read(limit.MAX_ICS_BYTES + 1)
    answer: dict[str, object]
    try:
        found = from_ics(data, today)
    except InvalidCalendar as exc:
        answer = {"error": str(exc)}
    except MemoryError:
        answer = {"error": _needs_more(memory)}
    else:
        answer = {
            "days": [day.isoformat() for day in found.days],
            "first": str(found.first_day),
            "last": str(found.last_day),
        }
    sys.stdout.write(json.dumps(answer))
    return 0


def _needs_more(memory: int) -> str:
    return f"the iCalendar file needs more than {memory // 2**20} MiB to read"


def _limit_memory(memory: int) -> None:
    try:
        import resource
    except ImportError:  # not a POSIX system: the parent's deadline still holds
        return
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
