"""`recover` right after an outage: a SIGKILLed daemon's run is still inside its lease, so one
pass leaves it. Without --wait the report names it and its takeover point; `recover --wait`
waits for that point (database clock) and takes it over; a run whose owner still renews is
reported and never waited for."""

from datetime import datetime

import pytest

from tests.support import processes_matching, query, wait_for

pytestmark = pytest.mark.slow
# A longer lease than tests.support.FAST: renewals every 3 s, an owner counts as silent after
# 6 s, its takeover point is 12 s after its last renewal, so the report has a 6 s window.
LEASE = ("--lease-ttl", "9s", "--lease-grace", "3s")


def _running_job(spawn, cli, url: str, name: str, marker: str) -> tuple[object, dict]:
    assert cli("tasks", "add", name, "--every", "1h", "--command", f"sleep {marker}").code == 0
    daemon = spawn(url, name, *LEASE)
    daemon.instance_id()
    assert cli("tasks", "trigger", name).code == 0
    (run,) = wait_for(lambda: query(url, "SELECT * FROM run WHERE status = 'running'"))
    return daemon, run


def _inside(cli, *args: str) -> dict:
    result = cli("recover", "--json", *LEASE, *args)
    assert result.code == 0, result.err
    return result.json()


def test_recover_reports_a_killed_daemons_run_inside_its_lease_and_wait_takes_it_over(
    spawn, cli, database_url
) -> None:
    # Would catch a recover that stays silent about runs inside their lease (the issue), or one
    # that takes a run over before its takeover point (by age, KNOWN-FAILURES 2).
    dying, run = _running_job(spawn, cli, database_url, "dying", "4251.125")
    dying.proc.kill()

    def silent() -> dict | None:
        found = _inside(cli)
        return None if found["inside_lease"][0]["owner_renewing"] else found

    report = wait_for(silent, timeout=15, message="the killed owner to count as silent")
    assert report["ids"]["taken_over"] == []
    (inside,) = report["inside_lease"]
    (row,) = query(database_url, "SELECT takeover_at, status FROM run")
    assert row["status"] == "running"  # inside its lease: the pass left it, rightly
    assert (inside["run_id"], inside["owner"]) == (run["id"], run["owner"])
    assert datetime.fromisoformat(inside["takeover_at"]) == row["takeover_at"]
    text = cli("recover", *LEASE)
    assert f"inside its lease: run {run['id']} " in text.out
    assert "stopped renewing: takeover from" in text.out

    waited = cli("recover", "--wait", "--json", *LEASE)
    assert waited.code == 0, waited.err
    assert waited.json()["ids"]["taken_over"] == [run["id"]]
    assert waited.json()["inside_lease"] == []
    assert waited.err.startswith("waiting until ")
    assert f"for the takeover of run {run['id']} (owner {run['owner']})" in waited.err
    (done,) = query(database_url, "SELECT status, finished_by, finished_at, takeover_at FROM run")
    assert done["status"] == "interrupted"
    assert done["finished_by"].startswith("recover@")
    assert done["finished_at"] > done["takeover_at"]  # never before its takeover point
    (occ,) = query(database_url, "SELECT status, interruptions FROM occurrence")
    assert occ == {"status": "queued", "interruptions": 1}
    assert processes_matching("sleep 4251.125") == []


def test_recover_wait_does_not_wait_for_a_run_whose_owner_still_renews(
    spawn, cli, database_url
) -> None:
    alive, run = _running_job(spawn, cli, database_url, "alive", "4252.125")
    result = cli("recover", "--wait=30s", "--json", *LEASE)
    assert result.code == 0, result.err
    assert "waiting" not in result.err  # nothing to wait for
    report = result.json()
    assert report["ids"]["taken_over"] == []
    assert report["wait_seconds"] == 30.0
    (inside,) = report["inside_lease"]
    assert (inside["run_id"], inside["owner_renewing"]) == (run["id"], True)
    text = cli("recover", "--wait=30s", *LEASE)
    assert f"owner {run['owner']} still renews it: left alone" in text.out
    (row,) = query(database_url, "SELECT status FROM run")
    assert row["status"] == "running"
    assert alive.stop() == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--wait", "--dry-run"), "--dry-run and --wait exclude each other"),
        (("--wait=0",), "Invalid value for '--wait': duration must be positive: '0'"),
        (("--wait=soon",), "Invalid value for '--wait': invalid duration 'soon'"),
        (("--wait=-5s",), "error: No such option '-5'"),  # click reads it as an option
    ],
)
def test_bad_wait_arguments_are_one_line_and_exit_2(cli, counts, args, message) -> None:
    before = counts()
    result = cli("recover", *args)
    assert result.code == 2
    assert message in result.err
    assert result.err.count("\n") == 1
    assert counts() == before
