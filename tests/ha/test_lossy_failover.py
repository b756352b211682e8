"""A failover that loses commits, under three real daemons given the pair's multi-host URL (issue
32, Proof): the stream to the standby is cut while the fleet commits, the fleet commits 9 s more
on the primary alone, the primary is stopped `-m immediate` and the standby promoted. Whatever ran
on the lost branch and runs again on the new primary must carry the same idempotency key and a
higher lease token, and never run beside its lost twin; no key names two firings; `audit` on the
new primary finds no violation and notes the reruns; every daemon lives and the fleet is back at
work.

The jobs, not the database, are the witnesses: each holds `flock` on its task's (or key's) lock
file for its life and appends one JSON line with the `SCHEDULER_*` values it was given and when
it started and ended. The test fails as having tested nothing unless the old primary, started
afterwards on a port no daemon knows, holds at least 20 runs the new primary lacks.

Fails on 2a764ea (before revision 0019): idempotency keys are `scheduler-daemon-occurrence-{id}`
and occurrence ids come from a sequence the lost commits hand out again, so dozens of keys were
given to two different firings; firings whose claim was lost ran again with the same token (1),
not a higher one."""

import json
import time
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

from tests.ha.pair import ReplicationPair
from tests.support import query, wait_for

TTL, GRACE = 3.0, 1.0  # tests.support.FAST
LOSSY_SECONDS = 9.0  # commits the standby never sees
LOST_RUNS_NEEDED = 20

# What each job's line holds: its field name and the shell value it takes.
FIELDS = {
    "task": "$SCHEDULER_TASK_NAME",
    "task_id": "$SCHEDULER_TASK_ID",
    "occurrence": "$SCHEDULER_OCCURRENCE_ID",
    "run": "$SCHEDULER_RUN_ID",
    "scheduled_for": "$SCHEDULER_SCHEDULED_FOR",
    "attempt": "$SCHEDULER_ATTEMPT",
    "token": "$SCHEDULER_LEASE_TOKEN",
    "key": "$SCHEDULER_IDEMPOTENCY_KEY",
    "run_uuid": "${SCHEDULER_RUN_UUID:-}",
    "lock": "$lock",
    "busy": "$busy",
    "started": "$started",
    "ended": "$(date +%s.%N)",
}
JOB = (
    """#!/bin/sh
# job LOG SECONDS [LOCK]: holds LOCK (flock) for its whole life; a lock found taken is an overlap.
# Appends one JSON line with what it was given, when it started and when it ended (or was stopped).
log=$1; secs=$2; lock=${3:-}
started=$(date +%s.%N); busy=false
if [ -n "$lock" ]; then
  exec 3>>"$lock"
  flock -n 3 || busy=true
fi
line() {
  printf '{"""
    + ",".join(f'"{name}":"%s"' for name in FIELDS)
    + """}\\n' \\
    """
    + " ".join(f'"{value}"' for value in FIELDS.values())
    + """ >> "$log"
}
trap 'trap "" TERM INT; line; exit 143' TERM INT
sleep "$secs"
trap "" TERM INT  # one line per job, even if a stop comes now
line
"""
)

# (name, schedule, overlap, concurrency key, seconds the job lives)
TASKS = (
    [(f"allow{i}", "1s", "allow", None, 1.2) for i in range(6)]
    + [(f"forbid{i}", "1s", "forbid", None, 1.5) for i in range(8)]
    + [(f"keyed{i}", "2s", "allow", f"k{i % 2}", 0.6) for i in range(4)]
)
MANUAL = "manual0"  # fired only by `tasks trigger`: a manual firing is its own occurrence


def _add_tasks(cli: Any, url: str, root: Path) -> Path:
    """The workload; returns the job log every job appends to."""
    job, log, locks = root / "job", root / "jobs.log", root / "locks"
    job.write_text(JOB)
    job.chmod(0o755)
    log.touch()
    locks.mkdir()
    for name, every, overlap, key, seconds in TASKS:
        lock = f"{locks}/key-{key}" if key else f"{locks}/task-{name}" if overlap != "allow" else ""
        keyed = ["--concurrency-key", key] if key else []
        argv = ["--every", every, "--overlap", overlap, *keyed]
        command = f"{job} {log} {seconds} {lock}".rstrip()
        added = cli("tasks", "add", name, *argv, "--command", command, url=url)
        assert added.code == 0, added.err
    manual = cli(
        "tasks", "add", MANUAL, "--cron", "0 0 1 1 *", "--overlap", "allow",
        "--command", f"{job} {log} 1.0", url=url,
    )  # fmt: skip
    assert manual.code == 0, manual.err
    return log


def _trigger(cli: Any, url: str) -> None:
    """A manual firing; one refused while the database changes hands is no firing."""
    cli("tasks", "trigger", MANUAL, url=url)


def _runs(url: str) -> set[tuple[Any, ...]]:
    """Every run as facts that do not repeat across branches (ids do)."""
    rows = query(
        url,
        "SELECT t.name, o.scheduled_for, r.attempt, r.started_at FROM run r"
        " JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id",
    )
    return {tuple(r.values()) for r in rows}


def _jobs(log: Path) -> list[dict[str, Any]]:
    jobs = []
    for text in log.read_text().splitlines():
        line = json.loads(text)  # one write() each: a killed job leaves no half line
        line["token"], line["attempt"] = int(line["token"]), int(line["attempt"])
        line["busy"] = line["busy"] == "true"
        line["firing"] = (line["task"], line["scheduled_for"])
        jobs.append(line)
    return jobs


def _findings(jobs: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Every broken promise the jobs' own log shows, by promise."""
    firings_by_key: dict[str, set[tuple[str, str]]] = defaultdict(set)
    keys_by_firing: dict[tuple[str, str], set[str]] = defaultdict(set)
    attempts: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    holders: dict[str, list[dict[str, Any]]] = defaultdict(list)
    uuids: dict[str, int] = defaultdict(int)
    for job in jobs:
        firings_by_key[job["key"]].add(job["firing"])
        keys_by_firing[job["firing"]].add(job["key"])
        attempts[job["firing"]].append(job)
        if job["lock"]:
            holders[job["lock"]].append(job)
        if job["run_uuid"]:
            uuids[job["run_uuid"]] += 1
    not_higher = []
    for firing, runs in attempts.items():
        runs.sort(key=lambda j: float(j["started"]))
        for first, second in pairwise(runs):
            if second["token"] <= first["token"]:
                not_higher.append((firing, first["token"], second["token"]))
    overlaps = [(j["lock"], j["task"], j["scheduled_for"]) for j in jobs if j["busy"]]
    for lock, held in holders.items():
        held.sort(key=lambda j: float(j["started"]))
        overlaps += [
            (lock, a["firing"], b["firing"])
            for a, b in pairwise(held)
            if float(b["started"]) < float(a["ended"])
        ]
    return {
        "keys given to two firings": [
            (k, sorted(f)) for k, f in firings_by_key.items() if len(f) > 1
        ],
        "firings given two keys": [(f, sorted(k)) for f, k in keys_by_firing.items() if len(k) > 1],
        "reruns without a higher token": not_higher,
        "overlaps": overlaps,
        "run uuids given to two jobs": [u for u, n in uuids.items() if n > 1],
    }


def test_a_failover_that_lost_commits_reruns_with_the_same_key_a_higher_token_and_no_overlap(
    pair: ReplicationPair, spawn, cli, tmp_path: Path
) -> None:
    url = pair.url()
    log = _add_tasks(cli, url, tmp_path)
    daemons = [spawn(url, f"d{i}", "--concurrency", "10") for i in range(3)]
    for daemon in daemons:
        daemon.instance_id()
    wait_for(
        lambda: query(url, "SELECT count(*) AS n FROM run WHERE status = 'success'")[0]["n"] >= 20,
        timeout=30,
        message="the fleet at work: 20 runs succeeded",
    )
    _trigger(cli, url)
    pair.wait_replayed()
    pair.cut_stream()
    cut_at = time.monotonic()
    while time.monotonic() - cut_at < LOSSY_SECONDS:  # the fleet commits; the standby sees none
        _trigger(cli, url)
        time.sleep(0.8)
    lost_primary = pair.primary
    pair.stop_immediate()
    pair.promote()
    ((promoted_at,),) = [tuple(r.values()) for r in query(url, "SELECT now() AS t")]
    promoted = time.monotonic()
    for _ in range(3):
        _trigger(cli, url)
        time.sleep(0.5)
    # Back at work on the new primary past every quiet period (TTL + grace from the first
    # sighting, and the longest TTL + grace before exclusive claims): runs of a `forbid` task, of
    # a key and of an `allow` task started after it, and succeeded.
    quiet_end = "%s + make_interval(secs => %s)"
    for overlap, keyed in (("forbid", False), ("allow", True), ("allow", False)):
        wait_for(
            lambda overlap=overlap, keyed=keyed: query(
                url,
                "SELECT 1 FROM run r JOIN occurrence o ON o.id = r.occurrence_id"
                " WHERE r.status = 'success' AND o.overlap = %s"
                " AND (o.concurrency_key IS NOT NULL) = %s"
                f" AND r.started_at > {quiet_end}",
                (overlap, keyed, promoted_at, TTL + GRACE + 1),
            ),
            timeout=40,
            message=f"a {overlap}{' keyed' if keyed else ''} run to succeed on the new primary",
        )
    time.sleep(max(0.0, promoted + 2 * (TTL + GRACE) - time.monotonic()))
    exited = {d.name: d.proc.returncode for d in daemons if d.proc.poll() is not None}
    audit = cli("audit", "--json", url=url)
    for daemon in daemons:  # every job ends (drained or stopped), so every job has its line
        daemon.stop()

    lost = _runs(pair.start_isolated(lost_primary)) - _runs(url)
    assert len(lost) >= LOST_RUNS_NEEDED, (
        f"the failover lost only {len(lost)} runs (needs {LOST_RUNS_NEEDED}): nothing was tested"
    )
    jobs = _jobs(log)
    broken = {promise: found for promise, found in _findings(jobs).items() if found}
    assert broken == {}, (
        f"{len(jobs)} jobs, {len(lost)} runs lost with the old primary; broken: "
        f"{ {promise: len(found) for promise, found in broken.items()} }; "
        f"first of each: { {promise: found[:3] for promise, found in broken.items()} }"
    )
    assert audit.code == 0, audit.out + audit.err
    assert audit.json()["violations"] == []
    # The runs in flight at the cut ran again after the promotion: audit says they may have
    # run twice (a notice, not a violation).
    notices = [n for n in audit.json().get("notices", []) if n["notice"] == "epoch_change_rerun"]
    assert notices, audit.out
    assert notices[0]["rows"]["occurrence_count"] > 0
    assert exited == {}, f"daemons that exited during the failover: {exited}"
