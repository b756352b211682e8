"""`scheduler-daemon tasks pause / resume` against a real database."""

from datetime import datetime, timedelta

import pytest

from tests.support import EVERY_MINUTE

pytestmark = pytest.mark.smoke


def test_pause_keeps_lifecycle_and_resume_schedules_from_now(cli, db) -> None:
    cli("tasks", "add", "p", *EVERY_MINUTE)
    db.execute("UPDATE task SET next_run_at = now() - interval '3 hours'")
    paused = cli("tasks", "pause", "p", "--json").json()
    assert paused["paused"] is True
    assert paused["status"] == "enabled"
    resumed = cli("tasks", "resume", "p", "--json").json()
    db_now = db.execute("SELECT now() AS n").fetchone()["n"]
    next_run = datetime.fromisoformat(resumed["next_run_at"])
    assert resumed["paused"] is False
    assert db_now < next_run <= db_now + timedelta(minutes=1)  # the missed 3 hours are not owed
