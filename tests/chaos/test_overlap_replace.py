"""`--overlap replace` with real daemons (issue 37 item 3): two replicas run a shell and a python
`replace` task whose jobs each hold an OS lock (`flock`, non-blocking) on a file of their task
for 3 s while their task fires every 2 s. Every new firing replaces the one before: a queued
predecessor is cancelled, a running one is asked to stop and keeps its slot until its owner
confirms its job is gone. The verdict comes from the jobs themselves (no job ever found its
task's lock taken: the OS saw no overlap, checked as the soak checks its locks), from the
history (every predecessor ended `cancelled` with reason `replaced`, or skipped `replaced`;
newer firings started, in firing order) and from `audit` (runs_overlap now covers replace).
A second test holds the window between the dispatcher's cancel request and the owner's
confirmation open (a second session holds the predecessor's run row) while firings arrive.

Fails on the claim before sd_claim_launch_v5 (it starts the replacement while the predecessor
still runs: a `1` in the job log, or the executing index failing the claim), and on a dispatch
that cancelled the running predecessor at once instead of asking its owner (the slot freed
before the job was gone)."""

import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import query, wait_for

pytestmark = pytest.mark.slow
TASKS = {
    "sh": (
        "--command",
        'exec 9>>"$TEST_JOB_DIR/sh.lock"; '
        "if flock -n 9; then t=0; else t=1; fi; "
        'echo "start sh $SCHEDULER_OCCURRENCE_ID $$ $t" >> "$TEST_JOB_DIR/joblog"; '
        "sleep 3 9>&-",
    ),
    "py": ("--call", "tests.jobs:replace_locked"),
}
SECONDS = 16


def _starts(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def _stopped_once_idle(url: str, daemons: list[Any], waiting: str) -> dict[str, Any]:
    """Waits until no firing is queued, launching or running (`waiting` says for what), takes
    the database's now() as {"t": …}, then stops each daemon, asserting a clean exit."""
    wait_for(
        lambda: (
            not query(
                url, "SELECT 1 FROM occurrence WHERE status IN ('queued', 'launching', 'running')"
            )
        ),
        timeout=30,
        message=waiting,
    )
    (stopped,) = query(url, "SELECT now() AS t")
    for daemon in daemons:
        assert daemon.stop() == 0, daemon.log()[-3000:]
    return stopped


def test_replace_jobs_holding_flock_never_overlap_and_newer_firings_start(
    spawn, cli, database_url, tmp_path
) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for name, target in TASKS.items():
        added = cli("tasks", "add", name, "--every", "2s", "--overlap", "replace", *target)
        assert added.code == 0, added.err
    env = {"TEST_JOB_DIR": str(jobs)}
    daemons = [spawn(database_url, n, env=env) for n in ("a", "b")]
    for daemon in daemons:
        daemon.instance_id()
    began = time.monotonic()
    log = jobs / "joblog"
    wait_for(
        lambda: (
            sum(1 for s in _starts(log) if s[1] == "py") >= 4
            and sum(1 for s in _starts(log) if s[1] == "sh") >= 4
        ),
        timeout=60,
        message="four jobs of each task to start",
    )
    time.sleep(max(0.0, SECONDS - (time.monotonic() - began)))
    cli("tasks", "pause", "sh")
    cli("tasks", "pause", "py")
    stopped = _stopped_once_idle(database_url, daemons, "the last jobs to end")

    starts = _starts(log)
    taken = [s for s in starts if s[4] != "0"]
    assert taken == [], f"a replace job found its task's lock taken: {taken}"
    for name in TASKS:
        rows = query(
            database_url,
            "SELECT o.id, o.scheduled_for, o.status, o.reason, r.status AS run_status, "
            "r.started_at, r.finished_at FROM occurrence o JOIN task t ON t.id = o.task_id "
            "LEFT JOIN run r ON r.occurrence_id = o.id WHERE t.name = %s "
            "ORDER BY o.occurrence_seq, r.id",
            (name,),
        )
        ran = [r for r in rows if r["run_status"] is not None]
        assert len(ran) >= 4, rows
        # Newer firings start, in firing order, each after the one before it was gone.
        by_start = sorted(ran, key=lambda r: r["started_at"])
        assert [r["scheduled_for"] for r in by_start] == sorted(r["scheduled_for"] for r in ran)
        for before, after in pairwise(by_start):
            assert before["finished_at"] <= after["started_at"], (before, after)
        # Each predecessor a newer firing replaced ended with that reason.
        replaced = [r for r in ran if r["run_status"] == "cancelled"]
        assert len(replaced) >= 2, ran
        assert {(r["status"], r["reason"]) for r in replaced} == {("cancelled", "replaced")}
        for r in rows:
            if r["run_status"] is None:  # replaced before it started, or paused away
                assert (r["status"], r["reason"]) in {
                    ("cancelled", "replaced"),
                    ("skipped", "replaced"),
                }, r
        # The jobs the OS saw are runs the database recorded.
        assert {int(s[2]) for s in starts if s[1] == name} <= {r["id"] for r in ran}
    audit = cli("audit", "--until", stopped["t"].isoformat(), "--settle", "2s")
    assert audit.code == 0, audit.out[-5000:] + audit.err
    print(f"replace: {len(starts)} jobs started, none overlapped; audit: {audit.out[:200]}")


def test_the_replacement_waits_while_the_owner_cannot_confirm_its_predecessor_is_gone(
    spawn, cli, database_url, tmp_path
) -> None:
    # The window between the dispatcher's cancel request and the owner's confirmation, held
    # open: a second session holds the predecessor's run row, so its owner can neither renew
    # (and hear the request) nor record the job's end; with a 20 s lease its job runs on,
    # holding its flock. Fails on a dispatch that ended the running predecessor at once (the
    # slot freed: the claim would start the replacement beside the job, which would find the
    # lock taken) and on the claim before sd_claim_launch_v5 (it picks the replacement and
    # meets occurrence_replace_executing_key: the claim error is in the daemon's log).
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    command = TASKS["sh"][1].replace("sleep 3", "sleep 120")
    added = cli("tasks", "add", "sh", "--every", "4s", "--overlap", "replace", "--command", command)
    assert added.code == 0, added.err
    env = {"TEST_JOB_DIR": str(jobs)}
    lease = ("--lease-ttl", "20s", "--lease-grace", "2s", "--instance-expiry", "60s")
    daemons = [spawn(database_url, n, *lease, env=env) for n in ("a", "b")]
    for daemon in daemons:
        daemon.instance_id()
    log = jobs / "joblog"
    (first,) = wait_for(lambda: _starts(log), timeout=30, message="the first job to start")
    predecessor = int(first[2])
    (run,) = wait_for(
        lambda: query(
            database_url,
            "SELECT id FROM run WHERE occurrence_id = %s AND status = 'running'",
            (predecessor,),
        ),
        message="the first run's row",
    )
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT 1 FROM run WHERE id = %s FOR UPDATE", (run["id"],))
        wait_for(
            lambda: query(
                database_url,
                "SELECT 1 FROM occurrence WHERE id = %s AND cancel_reason = 'replaced'",
                (predecessor,),
            ),
            timeout=15,
            message="the next firing's cancel request",
        )
        # In the window: the request is written, the job still runs and holds its lock. Two
        # more firings arrive meanwhile: each replaces the waiting one.
        time.sleep(8.5)
        rows = query(
            database_url,
            "SELECT id, status, reason FROM occurrence WHERE occurrence_seq >= "
            "(SELECT occurrence_seq FROM occurrence WHERE id = %s) ORDER BY occurrence_seq",
            (predecessor,),
        )
        assert rows[0] == {"id": predecessor, "status": "running", "reason": None}, rows
        waiting = [r for r in rows[1:] if r["status"] == "queued"]
        assert len(waiting) == 1, rows
        assert {(r["status"], r["reason"]) for r in rows[1:] if r is not waiting[0]} == {
            ("cancelled", "replaced")
        }, rows
        assert len(rows) >= 3, rows  # at least one waiting replacement was itself replaced
        assert len(_starts(log)) == 1  # nobody started the replacement beside the job
        assert query(database_url, "SELECT count(*) AS n FROM run")[0]["n"] == 1
        holder.rollback()
    # Released: the owner hears the request, stops the job and records it; then the newest
    # firing starts and finds the lock free.
    wait_for(lambda: len(_starts(log)) >= 2, timeout=30, message="the replacement to start")
    (ended,) = query(
        database_url, "SELECT status, reason FROM occurrence WHERE id = %s", (predecessor,)
    )
    assert ended == {"status": "cancelled", "reason": "replaced"}
    cli("tasks", "pause", "sh")
    for r in query(database_url, "SELECT id FROM occurrence WHERE status = 'running'"):
        assert cli("runs", "cancel", str(r["id"]), "--occurrence").code == 0
    stopped = _stopped_once_idle(database_url, daemons, "the last job to be stopped")
    for daemon in daemons:
        assert "occurrence_replace_executing_key" not in daemon.log()
    assert [s for s in _starts(log) if s[4] != "0"] == []
    audit = cli("audit", "--until", stopped["t"].isoformat(), "--settle", "2s")
    assert audit.code == 0, audit.out[-5000:] + audit.err
