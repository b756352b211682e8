"""`scheduler-daemon tasks show / list / next` against a real database: the documented JSON,
the human table, fire times, and secrets masked unless asked for."""

from datetime import UTC, datetime, timedelta

import pytest

pytestmark = pytest.mark.smoke


def test_add_then_show_and_list_print_the_documented_json(cli) -> None:
    added = cli(
        "tasks",
        "add",
        "backup",
        "--cron",
        "0 3 * * *",
        "--timezone",
        "Europe/Berlin",
        "--command",
        "pg_dump app",
        "--max-attempts",
        "3",
        "--backoff",
        "1m",
        "--json",
    )
    assert added.code == 0, added.err
    task = added.json()
    assert task["name"] == "backup"
    assert task["schedule_kind"] == "cron"
    assert task["timezone"] == "Europe/Berlin"
    assert task["overlap"] == "forbid"
    assert task["misfire"] == "run_once"
    assert task["max_attempts"] == 3
    assert task["backoff_seconds"] == 60.0
    next_run = datetime.fromisoformat(task["next_run_at"])
    assert next_run.astimezone(datetime.now(UTC).astimezone().tzinfo) > datetime.now(UTC)
    # 03:00 in Berlin is 01:00 or 02:00 UTC depending on DST
    assert next_run.astimezone(UTC).hour in (1, 2)
    assert cli("tasks", "show", "backup", "--json").json() == task
    assert cli("tasks", "show", str(task["id"]), "--json").json()["name"] == "backup"
    listed = cli("tasks", "list", "--json").json()
    assert [t["name"] for t in listed] == ["backup"]
    human = cli("tasks", "list")
    assert human.out.splitlines()[0].split()[:3] == ["ID", "NAME", "SCHEDULE"]
    assert "backup" in human.out


def test_next_prints_fire_times_in_the_task_zone_and_utc(cli) -> None:
    cli(
        "tasks",
        "add",
        "ny",
        "--cron",
        "30 2 * * *",
        "--timezone",
        "America/New_York",
        "--call",
        "mymod:job",
    )
    rows = cli("tasks", "next", "ny", "-n", "3", "--json").json()
    assert len(rows) == 3
    for row in rows:
        local, utc = datetime.fromisoformat(row["local"]), datetime.fromisoformat(row["utc"])
        assert local == utc
        assert utc.utcoffset() == timedelta(0)


def test_secret_headers_and_url_passwords_are_masked_unless_show_secrets(cli) -> None:
    added = cli(
        "tasks",
        "add",
        "hook",
        "--every",
        "1h",
        "--http",
        "https://robot:pw-in-url@hook.example/run",
        "--header",
        "Authorization: Bearer tok-1",
        "--header",
        "X-Request-Source: scheduler",
        "--json",
    )
    assert added.code == 0, added.err
    masked = {"Authorization": "***", "X-Request-Source": "scheduler"}
    for output in (added.json(), cli("tasks", "show", "hook", "--json").json()):
        assert output["headers"] == masked
        assert output["target"] == "https://robot:***@hook.example/run"
    assert cli("tasks", "list", "--json").json()[0]["headers"] == masked
    text = cli("tasks", "show", "hook").out
    assert "tok-1" not in text
    assert "pw-in-url" not in text
    shown = cli("tasks", "show", "hook", "--show-secrets", "--json").json()
    assert shown["headers"]["Authorization"] == "Bearer tok-1"
    assert shown["target"] == "https://robot:pw-in-url@hook.example/run"
    listed = cli("tasks", "list", "--show-secrets", "--json").json()
    assert listed[0]["headers"]["Authorization"] == "Bearer tok-1"

    updated = cli("tasks", "update", "hook", "--header", "X-Api-Key: k-2", "--json").json()
    assert updated["headers"] == {"X-Api-Key": "***"}  # the given set replaces the old one
    assert cli("tasks", "update", "hook", "--header", "none", "--json").json()["headers"] == {}
