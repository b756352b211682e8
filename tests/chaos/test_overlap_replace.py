"""`--overlap replace` with real daemons (issue 37 item 3): two replicas run a shell and a python
`replace` task whose jobs each hold an OS lock (`flock`, non-blocking) on a file of their task
for 3 s while their task fires every 2 s. Every new firing replaces the one before: a queued
predecessor is cancelled, a running one is asked to stop and keeps its slot until its owner
confirms its job is gone. The verdict comes from the jobs themselves (no job ever found its
task's lock taken: the OS saw no overlap, checked as the soak checks its locks), from the
history (every predecessor ended `cancelled` with reason `replaced`, or skipped `replaced`;
newer firings started, in firing order) and from `audit` (runs_overlap now covers replace).

Fails on the claim before sd_claim_launch_v5 (it starts the replacement while the predecessor
still runs: a `1` in the job log, or the executing index failing the claim), and on a dispatch
that cancelled the running predecessor at once instead of asking its owner (the slot freed
before the job was gone)."""

import time
from itertools import pairwise
from pathlib import Path

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
    wait_for(
        lambda: (
            not query(
                database_url,
                "SELECT 1 FROM occurrence WHERE status IN ('queued', 'launching', 'running')",
            )
        ),
        timeout=30,
        message="the last jobs to end",
    )
    (stopped,) = query(database_url, "SELECT now() AS t")
    for daemon in daemons:
        assert daemon.stop() == 0, daemon.log()[-3000:]

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
