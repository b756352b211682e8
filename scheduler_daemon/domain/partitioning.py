"""The history's partitions by time (ADR 0033): the interval's bounds, the cap on how many
partitions a retention may span, the margin created ahead, and when too few remain ahead (pure).
"""

from datetime import timedelta

from scheduler_daemon.domain.duration import format_duration

MIN_INTERVAL = timedelta(minutes=1)
MAX_INTERVAL = timedelta(days=31)
DEFAULT_INTERVAL = timedelta(days=1)
MAX_PARTITIONS = 1_000  # retention / interval: planning and relcache cost grow with the count
WARN_AHEAD = 2  # fewer partitions than this not yet past: warned once a minute, `status` shows it
UPKEEP_EVERY_SECONDS = 60.0  # a daemon's upkeep calls, at most


class BadPartitioning(ValueError):
    """An interval, or a retention with an interval, that cannot work; one line (exit 2)."""


def check_interval(interval: timedelta) -> timedelta:
    """`history-partition-interval`: a whole number of minutes, 1 minute to 31 days (partitions
    are named by their lower bound to the minute)."""
    if not MIN_INTERVAL <= interval <= MAX_INTERVAL:
        raise BadPartitioning(
            f"history-partition-interval must be 1m to 31d, got {format_duration(interval)}"
        )
    if interval % MIN_INTERVAL:
        raise BadPartitioning(
            "history-partition-interval must be a whole number of minutes, got "
            + format_duration(interval)
        )
    return interval


def check_count(retention: timedelta | None, interval: timedelta | None) -> None:
    """A retention may span at most MAX_PARTITIONS partitions of the interval (the default's
    when unset); no retention keeps everything and drops nothing."""
    if retention is None:
        return
    step = interval or DEFAULT_INTERVAL
    count = -(-retention // step)  # ceiling
    if count > MAX_PARTITIONS:
        raise BadPartitioning(
            f"history-retention {format_duration(retention)} over history-partition-interval "
            f"{format_duration(step)} is {count:,} partitions, more than {MAX_PARTITIONS:,}: "
            "lengthen the interval or shorten the retention"
        )


def ahead(interval: timedelta | None) -> timedelta:
    """How far past now the upkeep creates partitions: 3 intervals, or 1 hour if more."""
    return max(3 * (interval or DEFAULT_INTERVAL), timedelta(hours=1))


def too_few_ahead(partitions_ahead: int | None) -> bool:
    """Whether partitioned history is short of partitions ahead (None: not partitioned)."""
    return partitions_ahead is not None and partitions_ahead < WARN_AHEAD
