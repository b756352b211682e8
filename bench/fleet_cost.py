"""What bench/ab_cpu.py makes of what it read: jobs/s from the jobs' records, CPU per job by
group, WAL per job from two readings of a private cluster's counters, the load average. Pure
functions but `load_average` (no process, no database), so they can be tested alone."""

import os
import statistics
from dataclasses import dataclass

QUIET_LOAD = 1.0  # issue 48: "a quiet machine: load average under 1 at the start, else rerun"


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def quiet_warning(load: str) -> str | None:
    """A line saying the figures are not a quiet machine's, when the 1-minute load average (the
    first field of `load`) is at or over QUIET_LOAD; None when it is under."""
    one = float(load.split(maxsplit=1)[0])
    if one < QUIET_LOAD:
        return None
    return (
        f"NOT A QUIET MACHINE: load average {one:.2f} >= {QUIET_LOAD:g} at the start; "
        "absolute figures are provisional (rerun on a quiet machine)"
    )


def spans(text: str) -> list[tuple[float, float]]:
    """(start, end) of each job in a record file's text: the last two fields of each line, so
    both bench.noop_job's `run_id start end` and bench.noop's `ident due start end` read."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if fields:
            out.append((float(fields[-2]), float(fields[-1])))
    return out


def jobs_per_second(text: str) -> float:
    """Jobs over the span from the first job's start to the last one's end."""
    rows = spans(text)
    span = max(end for _, end in rows) - min(start for start, _ in rows)
    return len(rows) / span if span > 0 else float("inf")


def per_job(total_ms: dict[str, float], jobs: int) -> dict[str, float]:
    return {group: ms / jobs for group, ms in total_ms.items()}


def since(total_ms: dict[str, float], at_first: dict[str, float]) -> dict[str, float]:
    """CPU ms by group after the first job started: the start-up (imports, connections, the
    first pass) left out, which a long-running daemon pays once."""
    return {group: ms - at_first.get(group, 0.0) for group, ms in total_ms.items()}


def lsn_bytes(lsn: str) -> int:
    """A WAL location (`16/B374D848`) as a byte position."""
    high, low = lsn.split("/")
    return (int(high, 16) << 32) + int(low, 16)


@dataclass(frozen=True)
class WalReading:
    """A private cluster's WAL counters at one moment: the insert LSN and pg_stat_wal's."""

    lsn: str
    records: int
    fpi: int


def wal_per_job(
    before: WalReading, after: WalReading, fpi_bytes: int, jobs: int
) -> dict[str, float]:
    """WAL bytes per job (exact, from the LSNs), without the full-page images' bytes (from
    pg_waldump), full-page images per job and their bytes, WAL records per job."""
    nbytes = lsn_bytes(after.lsn) - lsn_bytes(before.lsn)
    return {
        "wal_B": nbytes / jobs,
        "wal_noFPI_B": (nbytes - fpi_bytes) / jobs,
        "fpi": (after.fpi - before.fpi) / jobs,
        "fpi_B": fpi_bytes / jobs,
        "records": (after.records - before.records) / jobs,
    }


def top_kinds(kinds: dict[str, tuple[int, int, int]], jobs: int, count: int = 8) -> str:
    """The WAL record kinds that wrote the most bytes (record and full-page image bytes, from
    pg_waldump --stats=record), per job: `Heap/UPDATE 3.0 (590 B)`, largest first."""
    ranked = sorted(kinds.items(), key=lambda item: -(item[1][1] + item[1][2]))[:count]
    return ", ".join(
        f"{kind} {n / jobs:.1f} ({(size + images) / jobs:,.0f} B)"
        for kind, (n, size, images) in ranked
    )


def medians(sittings: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the sittings that have it."""
    keys = {key for sitting in sittings for key in sitting}
    return {key: statistics.median(s[key] for s in sittings if key in s) for key in sorted(keys)}
