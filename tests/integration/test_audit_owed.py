"""Owed is not missing (issue 44, item 6): with the whole fleet stopped, the firings at or after
a task's `next_run_at` were never reached by a dispatcher; `audit` shows them as an `owed`
notice and exits 0. A firing before `next_run_at` with no row is still `firing_missing`: the
dispatcher records every firing it passes in the transaction that advances `next_run_at`."""

from datetime import datetime, timedelta
from typing import Any

from tests.integration.test_audit import _audit, _backdated, _instant, _occurrence, _violations
from tests.support import query

SECOND = timedelta(seconds=1)


def _stopped_fleet(client: Any, url: str, *, absent: set[int]) -> tuple[int, datetime]:
    """An every-second task created five minutes ago whose fleet ran for its first minute
    (rows for firings 1..60 but `absent`) and then stopped: next_run_at is firing 61."""
    task, created = _backdated(client, url, "every1s", SECOND, ago="5 minutes")
    anchor = created["anchor_at"]
    for k in range(1, 61):
        if k not in absent:
            _occurrence(url, task.id, k, scheduled_for=anchor + k * SECOND)
    query(url, "UPDATE task SET next_run_at = %s WHERE id = %s", (anchor + 61 * SECOND, task.id))
    return task.id, anchor


def _owed(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [n for n in report["notices"] if n["notice"] == "owed"]


def test_a_stopped_fleets_undispatched_firings_are_an_owed_notice_and_exit_0(
    cli, client, database_url
) -> None:
    """Catches owed firings reported as missing: the old code exited 1 with a firing_missing
    gap from firing 61 to the settle cutoff whenever the fleet was stopped."""
    task_id, anchor = _stopped_fleet(client, database_url, absent=set())
    code, report = _audit(cli)
    assert (code, _violations(report)) == (0, [])
    (notice,) = _owed(report)
    rows = notice["rows"]
    first, last = _instant(rows["first_owed"]), _instant(rows["last_owed"])
    assert rows["task_id"] == task_id
    assert _instant(rows["next_run_at"]) == first == anchor + 61 * SECOND  # at it: owed
    assert last <= _instant(report["until"]) - timedelta(seconds=report["settle_seconds"])
    assert last > anchor + 200 * SECOND  # about four minutes of firings since the stop
    assert rows["owed_count"] == (last - first) // SECOND + 1
    text = cli("audit")
    assert text.code == 0
    # a second later, a firing more may be owed
    assert f"notice, owed: task {task_id}: " in text.out
    assert f" firing(s) from {first.isoformat()} to " in text.out
    assert text.out.splitlines()[-1].startswith("audit: no violations in 12 check(s)")


def test_a_firing_before_next_run_at_without_a_row_is_still_missing(
    cli, client, database_url
) -> None:
    """The line is next_run_at: firing 30, passed by the dispatcher with no row, is missing;
    the firings after the stop are owed only (the old code reported them as a second gap)."""
    task_id, anchor = _stopped_fleet(client, database_url, absent={30})
    code, report = _audit(cli)
    assert code == 1
    (gap,) = _violations(report)
    assert (gap["check"], gap["rows"]["task_id"], gap["rows"]["missing_count"]) == (
        "firing_missing",
        task_id,
        1,
    )
    assert _instant(gap["rows"]["first_missing"]) == anchor + 30 * SECOND
    (notice,) = _owed(report)
    assert _instant(notice["rows"]["first_owed"]) == anchor + 61 * SECOND
