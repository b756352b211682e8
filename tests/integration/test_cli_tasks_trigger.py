"""`scheduler-daemon tasks trigger` against a real database: a manual occurrence follows the
task's overlap policy."""

import pytest

from tests.support import EVERY_MINUTE

pytestmark = pytest.mark.smoke


def test_trigger_queues_a_manual_occurrence_and_follows_forbid(cli, db) -> None:
    cli("tasks", "add", "t", *EVERY_MINUTE)
    first = cli("tasks", "trigger", "t", "--json").json()
    assert (first["status"], first["trigger"], first["occurrence_seq"]) == ("queued", "manual", 1)
    second = cli("tasks", "trigger", "t")
    assert second.code == 0
    assert "skipped: overlap" in second.out
    rows = db.execute(
        "SELECT occurrence_seq, status, reason FROM occurrence ORDER BY id"
    ).fetchall()
    assert rows == [
        {"occurrence_seq": 1, "status": "queued", "reason": None},
        {"occurrence_seq": 2, "status": "skipped", "reason": "overlap"},
    ]


def test_trigger_of_a_queue_task_queues_behind_the_active_one(cli, db) -> None:
    cli("tasks", "add", "q", *EVERY_MINUTE, "--overlap", "queue")
    cli("tasks", "trigger", "q")
    cli("tasks", "trigger", "q")
    statuses = [r["status"] for r in db.execute("SELECT status FROM occurrence ORDER BY id")]
    assert statuses == ["queued", "queued"]
