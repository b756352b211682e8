"""Schedules: the instants at which a task fires (cron in an IANA zone, fixed interval, one shot).

Pure code: time is passed in, nothing is read from a clock. Every schedule answers the same
questions (`base.Schedule`: `next_after`, `prev_at_or_before`, `fire_times`,
`fire_times_reversed`, `count_between`) with aware UTC datetimes. One module per concern, as
APScheduler splits its triggers: `cron_syntax` (which expressions are accepted), `wall` (the
wall-clock walk), `zone` (IANA zones and wall time <-> instants across DST), `cron`
(`CronSchedule`), `fixed` (`IntervalSchedule`, `OneShotSchedule`). This module builds the one
a task definition describes.
"""

from datetime import datetime, timedelta

from scheduler_daemon.domain.schedule.base import ScheduleError
from scheduler_daemon.domain.schedule.cron import CronSchedule
from scheduler_daemon.domain.schedule.fixed import IntervalSchedule, OneShotSchedule


def make_schedule(
    *,
    cron: str | None,
    every: timedelta | None,
    at: datetime | None,
    timezone: str,
    dst_gap: str,
    dst_overlap: str,
    anchor: datetime | None,
    either_days: bool = True,
) -> CronSchedule | IntervalSchedule | OneShotSchedule:
    """The schedule a definition describes: the first of `cron`, `every`, `at` that is set.
    `either_days` False: a cron's day fields as builds before revision 0026 read them
    (CronSchedule)."""
    if cron is not None:
        return CronSchedule(cron, timezone, dst_gap, dst_overlap, either_days)
    if every is not None:
        if anchor is None:
            raise ScheduleError("an interval schedule needs its anchor (the creation time)")
        return IntervalSchedule(every, anchor)
    if at is None:
        raise ScheduleError("no schedule: give one of cron, every or at")
    return OneShotSchedule(at)
