"""The CLI records each action an operator takes in `operator_action` (revision 0027), as the
console does: trigger, pause, resume, cancel and a backfill that queued; a dry run, a read and
a refused action record nothing."""

from scheduler_daemon.cli.base import who
from tests.support import EVERY_MINUTE


def test_the_cli_records_who_did_what_to_which_task_and_occurrence(cli, db) -> None:
    cli("tasks", "add", "t", *EVERY_MINUTE)
    assert cli("tasks", "trigger", "t").code == 0
    assert cli("tasks", "pause", "t").code == 0
    assert cli("tasks", "resume", "t").code == 0
    assert cli("runs", "cancel", "--occurrence", "1").code == 0
    window = ("--from", "2026-01-01T00:00", "--to", "2026-01-01T00:02")
    assert cli("tasks", "backfill", "t", *window, "--dry-run").code == 0
    assert cli("tasks", "backfill", "t", *window).code == 0
    # refused (already cancelled) and read-only commands record nothing
    assert cli("runs", "cancel", "--occurrence", "1").code == 2
    cli("tasks", "show", "t")
    rows = db.execute(
        "SELECT actor, action, source, task_id, occurrence_id, detail, at <= now() AS past"
        " FROM operator_action ORDER BY id"
    ).fetchall()
    assert [(r["action"], r["occurrence_id"]) for r in rows] == [
        ("trigger", 1),
        ("pause", None),
        ("resume", None),
        ("cancel", 1),
        ("backfill", None),
    ]
    assert {(r["actor"], r["source"], r["task_id"], r["past"]) for r in rows} == {
        (who(), "cli", 1, True)
    }
    assert rows[0]["detail"] == "occurrence 1 queued"
    assert rows[4]["detail"].startswith("queued 3 backfill occurrence(s) of task t")


def test_an_action_whose_record_is_refused_still_stands_with_a_warning(cli, db) -> None:
    cli("tasks", "add", "t", *EVERY_MINUTE)
    # the database refuses every record (as a role without INSERT on it would, before `db roles`
    # ran after this migrate): the test database's superuser needs a constraint for that
    db.execute("ALTER TABLE operator_action ADD CONSTRAINT refuse_all CHECK (false) NOT VALID")
    result = cli("tasks", "trigger", "t")
    assert result.code == 0
    assert result.out.strip() == "occurrence 1 queued"
    assert result.err.startswith("warning: trigger done but not recorded: ")
    assert db.execute("SELECT status FROM occurrence").fetchone()["status"] == "queued"
    assert db.execute("SELECT count(*) AS n FROM operator_action").fetchone()["n"] == 0
