"""`scheduler-daemon tasks delete` against a real database: refused while active, `--force`
cancels and frees the name."""

import pytest

from tests.support import EVERY_MINUTE

pytestmark = pytest.mark.smoke


def test_delete_is_refused_while_active_and_force_cancels_and_frees_the_name(
    cli, db, counts
) -> None:
    task = cli("tasks", "add", "d", *EVERY_MINUTE, "--json").json()
    cli("tasks", "trigger", "d")
    before = counts()
    refused = cli("tasks", "delete", "d")
    assert refused.code == 2
    assert refused.err.strip() == "error: task 'd' has 1 active occurrence(s); --force cancels them"
    assert counts() == before
    assert cli("tasks", "delete", "d", "--force").code == 0
    # The triggered one: a minute boundary passed since `add` leaves a `deleted` row of the
    # cron's owed firing beside it (seen in CI, where fetchone() read that row).
    occ = db.execute(
        "SELECT status, reason, lease_token FROM occurrence WHERE trigger = 'manual'"
    ).fetchone()
    assert occ == {"status": "cancelled", "reason": "task deleted", "lease_token": 1}
    assert cli("tasks", "show", "d").code == 2
    history = cli("runs", "list", "--task", str(task["id"]), "--json").json()
    assert [(h["status"], h["task_id"]) for h in history] == [("cancelled", task["id"])]
    assert cli("tasks", "add", "d", *EVERY_MINUTE).code == 0  # the name is free again
