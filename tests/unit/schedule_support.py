"""What the schedule tests share: UTC instants and the first fire times of a schedule."""

from datetime import UTC, datetime

from scheduler_daemon.domain.schedule.base import Schedule


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def fires(schedule: Schedule, after: datetime, count: int) -> list[datetime]:
    return list(schedule.fire_times(after, limit=count))
