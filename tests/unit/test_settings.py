"""`DaemonSettings.validate`: each timing and range invariant accepted at its boundary and
refused just past it, with a message that names the flag to fix."""

from dataclasses import replace
from datetime import timedelta

import pytest

from scheduler_daemon.settings import (
    PASS_BLOCK_BOUND,
    SHUTDOWN_MARGIN,
    DaemonSettings,
    InvalidSettings,
)

BASE = DaemonSettings(instance_prefix="host")
TICK = timedelta(microseconds=1)  # the smallest step past a boundary a timedelta can take
S = timedelta(seconds=1)
TTL, GRACE = BASE.lease_ttl, BASE.lease_grace
STALL = BASE.poll_interval + PASS_BLOCK_BOUND


def test_the_defaults_are_valid_and_validate_returns_the_settings() -> None:
    assert BASE.validate() is BASE


# Each case sits exactly on a boundary an invariant allows (or one step inside it).
ACCEPTED = {
    "one slot": {"concurrency": 1},
    "a one-letter instance id": {"instance_prefix": "h"},
    "the shortest poll interval": {"poll_interval": TICK},
    "a 5m poll interval": {"poll_interval": timedelta(minutes=5), "reconcile_interval": 300 * S},
    "the shortest lease ttl": {"lease_ttl": 3 * S},
    "the shortest grace": {"lease_grace": TICK},
    "reconcile as often as poll": {"reconcile_interval": BASE.poll_interval},
    "no drain": {"drain_timeout": timedelta(0)},
    "drain plus margin equal to stop": {"drain_timeout": 25 * S, "stop_timeout": 30 * S},
    "one interruption": {"max_interruptions": 1},
    "instance expiry one step past ttl plus grace": {"instance_expiry": TTL + GRACE + TICK},
    "http port 0 (off)": {"http_port": 0},
    "the highest http port": {"http_port": 65535},
    "no per-task gauges": {"metrics_task_limit": 0},
    "the most tasks named": {"metrics_task_limit": 10_000},
    "one failed pass": {"max_failed_passes": 1},
    "no batch window": {"batch_window": timedelta(0)},
    "the longest batch window": {"batch_window": timedelta(milliseconds=100)},
    "no watchdog": {"watchdog": None},
    "a watchdog one step past the stall timeout": {"watchdog": STALL + TICK},
}


@pytest.mark.parametrize("changes", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_settings_on_the_boundary_of_each_invariant_are_accepted(changes: dict) -> None:
    settings = replace(BASE, **changes)
    assert settings.validate() is settings


# Each case steps just past one boundary, the others left at their defaults.
REFUSED = {
    "no slot": ({"concurrency": 0}, "--concurrency must be at least 1"),
    "a negative batch window": (
        {"batch_window": -TICK},
        "--batch-window must be between 0 and 100ms",
    ),
    "a batch window past 100ms": (
        {"batch_window": timedelta(milliseconds=100) + TICK},
        "--batch-window must be between 0 and 100ms",
    ),
    "an empty instance id": ({"instance_prefix": ""}, "--instance-id must not be empty"),
    "a blank instance id": ({"instance_prefix": "  "}, "--instance-id must not be empty"),
    "a zero poll interval": (
        {"poll_interval": timedelta(0)},
        "--poll-interval must be between 0 and 5m",
    ),
    "a negative poll interval": (
        {"poll_interval": -S},
        "--poll-interval must be between 0 and 5m",
    ),
    "a poll interval past 5m": (
        {"poll_interval": timedelta(minutes=5) + TICK, "reconcile_interval": 600 * S},
        "--poll-interval must be between 0 and 5m",
    ),
    "a lease ttl under 3s": (
        {"lease_ttl": 3 * S - TICK},
        "--lease-ttl must be at least 3s (renewal runs every TTL/3)",
    ),
    "no grace": ({"lease_grace": timedelta(0)}, "--lease-grace must be positive"),
    "a negative grace": ({"lease_grace": -S}, "--lease-grace must be positive"),
    "reconcile more often than poll": (
        {"reconcile_interval": BASE.poll_interval - TICK},
        "--reconcile-interval must not be shorter than --poll-interval",
    ),
    "a negative drain": ({"drain_timeout": -TICK}, "--drain-timeout must not be negative"),
    "drain plus margin past stop": (
        {"drain_timeout": 25 * S + TICK, "stop_timeout": 30 * S},
        "--drain-timeout 25s plus 5s to record outcomes exceeds --stop-timeout 30s",
    ),
    "no interruption allowed": (
        {"max_interruptions": 0},
        "--max-interruptions must be at least 1",
    ),
    "instance expiry equal to ttl plus grace": (
        {"instance_expiry": TTL + GRACE},
        "--instance-expiry must be longer than --lease-ttl plus --lease-grace",
    ),
    "a negative http port": (
        {"http_port": -1},
        "--http-port must be between 0 (off) and 65535",
    ),
    "an http port past 65535": (
        {"http_port": 65536},
        "--http-port must be between 0 (off) and 65535",
    ),
    "a blank http host": ({"http_host": " "}, "--http-host must not be empty"),
    "a negative task limit": (
        {"metrics_task_limit": -1},
        "--metrics-task-limit must be between 0 (no per-task gauges) and 10,000",
    ),
    "a task limit past 10,000": (
        {"metrics_task_limit": 10_001},
        "--metrics-task-limit must be between 0 (no per-task gauges) and 10,000",
    ),
    "no failed pass allowed": (
        {"max_failed_passes": 0},
        "--max-failed-passes must be at least 1",
    ),
    "a watchdog equal to the stall timeout": (
        {"watchdog": STALL},
        "the systemd watchdog (91s, WatchdogSec=) must be longer than --poll-interval + 90s "
        "(91s), the longest a healthy loop iteration takes",
    ),
}


@pytest.mark.parametrize(("changes", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_settings_one_step_past_an_invariant_are_refused_naming_the_flag(
    changes: dict, message: str
) -> None:
    with pytest.raises(InvalidSettings) as refused:
        replace(BASE, **changes).validate()
    assert str(refused.value).startswith(message)


def test_the_drain_bound_follows_the_shutdown_margin_and_the_stop_timeout() -> None:
    # Not a fixed 25s: a longer stop timeout allows a longer drain, by the same margin.
    stop = timedelta(minutes=2)
    replace(BASE, stop_timeout=stop, drain_timeout=stop - SHUTDOWN_MARGIN).validate()
    with pytest.raises(InvalidSettings, match="exceeds --stop-timeout 120s"):
        replace(BASE, stop_timeout=stop, drain_timeout=stop - SHUTDOWN_MARGIN + TICK).validate()


def test_the_watchdog_bound_follows_the_poll_interval() -> None:
    # A slower poll makes a healthy iteration longer, so the same watchdog becomes too short.
    watchdog = STALL + TICK
    replace(BASE, watchdog=watchdog).validate()
    slower = replace(BASE, watchdog=watchdog, poll_interval=2 * S, reconcile_interval=5 * S)
    with pytest.raises(InvalidSettings, match=r"--poll-interval \+ 90s \(92s\)"):
        slower.validate()


def test_the_instance_expiry_bound_follows_the_lease_ttl_and_grace() -> None:
    long_lease = replace(BASE, lease_ttl=timedelta(minutes=8), lease_grace=timedelta(minutes=2))
    with pytest.raises(InvalidSettings, match="--instance-expiry must be longer"):
        long_lease.validate()  # the default 10m expiry equals 8m + 2m
    replace(long_lease, instance_expiry=timedelta(minutes=10) + TICK).validate()
