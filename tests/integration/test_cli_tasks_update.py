"""`scheduler-daemon tasks update` against a real database: a changed definition reschedules,
a naive `--at` reads in the task's zone, `none` clears an optional value."""

from datetime import datetime

import pytest

from tests.support import EVERY_MINUTE

pytestmark = pytest.mark.smoke


def test_update_changes_the_definition_and_reschedules(cli) -> None:
    cli("tasks", "add", "u", *EVERY_MINUTE)
    updated = cli(
        "tasks", "update", "u", "--cron", "0 0 1 1 *", "--overlap", "queue", "--json"
    ).json()
    assert updated["cron"] == "0 0 1 1 *"
    assert updated["overlap"] == "queue"
    assert datetime.fromisoformat(updated["next_run_at"]).month == 1
    assert (
        cli("tasks", "update", "u", "--every", "5m", "--json").json()["schedule_kind"] == "interval"
    )


def test_update_reads_a_naive_at_in_the_tasks_own_zone(cli) -> None:
    cli(
        "tasks",
        "add",
        "paris",
        "--at",
        "2031-01-01T08:00",
        "--timezone",
        "Europe/Paris",
        "--command",
        "true",
    )
    updated = cli("tasks", "update", "paris", "--at", "2031-01-01T09:00", "--json").json()
    assert updated["at"] == "2031-01-01T08:00:00+00:00"  # 09:00 in Paris is 08:00 UTC in winter


def test_update_clears_optional_values_with_none(cli) -> None:
    cli(
        "tasks",
        "add",
        "opt",
        "--every",
        "1h",
        "--command",
        "true",
        "--timeout",
        "5m",
        "--concurrency-key",
        "k",
        "--start-deadline",
        "1m",
        "--overlap",
        "queue",
        "--misfire",
        "run_all",
        "--catchup-limit",
        "3",
        "--catchup-window",
        "1h",
    )
    cleared = cli(
        "tasks",
        "update",
        "opt",
        "--timeout",
        "none",
        "--concurrency-key",
        "None",
        "--start-deadline",
        "none",
        "--catchup-limit",
        "none",
        "--catchup-window",
        "none",
        "--json",
    ).json()
    assert [
        cleared[k]
        for k in (
            "timeout_seconds",
            "concurrency_key",
            "start_deadline_seconds",
            "catchup_limit",
            "catchup_window_seconds",
        )
    ] == [None] * 5
    assert (
        cli("tasks", "add", "x", "--every", "1h", "--command", "true", "--timeout", "none").code
        == 2
    )  # only update clears
