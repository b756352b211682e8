"""The fleet on a real Patroni cluster (tests/ha/patroni.py: one etcd, two Patroni-managed nodes):
a planned `patronictl switchover` and an unplanned leader loss, each under load (issue 32, Proof).

Three real daemons on the cluster's multi-host URL run 12 every-second tasks: `forbid` ones,
`allow` ones and two concurrency keys. Every job appends one line with the `SCHEDULER_*` values
it was given to a log, and every `forbid` or keyed job holds an OS lock (`flock -n`) on its task's
or key's file for its whole life, reporting a lock found taken: an overlap the database never saw
(a job launched on a branch the promotion lost) is still caught. The verdicts come from that log,
the database history and `scheduler-daemon audit`, never from the harness's bookkeeping.
"""

import itertools
import json
import time
from collections import defaultdict
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from tests.ha.patroni import PatroniCluster
from tests.support import query, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TTL, GRACE, RECONCILE = 3.0, 1.0, 1.0  # tests.support.FAST
SETTLE = TTL + GRACE + RECONCILE + 2.0  # past any quiet period and takeover bound, with slack
LAG = 5.0  # seconds of commits the leader loss takes with it (issue 32 measured 8-10 s lost)
LOST = 10  # the leader loss must have lost at least this many runs that jobs saw start
FIELDS = ("task", "scheduled_for", "attempt", "token", "key", "run", "run_uuid")
JOB = """#!/bin/sh
# job LOG OVERLAPS SECONDS [LOCK]: logs what it was given, holds LOCK for its whole life (the sleep
# inherits the descriptor); a lock found taken is an overlap, whatever the database recorded.
log=$1; overlaps=$2; secs=$3; lock=${4:-}
if [ -n "$lock" ]; then
  exec 3>>"$lock"
  flock -n 3 || echo "$(date +%s.%N) $lock taken: task=$SCHEDULER_TASK_NAME \
run=$SCHEDULER_RUN_ID token=$SCHEDULER_LEASE_TOKEN" >> "$overlaps"
fi
printf '%s\\t%s\\t%s\\t%s\\t%s\\t%s\\t%s\\n' "$SCHEDULER_TASK_NAME" "$SCHEDULER_SCHEDULED_FOR" \
  "$SCHEDULER_ATTEMPT" "$SCHEDULER_LEASE_TOKEN" "$SCHEDULER_IDEMPOTENCY_KEY" \
  "$SCHEDULER_RUN_ID" "${SCHEDULER_RUN_UUID:-}" >> "$log"
sleep "$secs"
"""
# name: (overlap, concurrency key, seconds)
TASKS: dict[str, tuple[str, str | None, float]] = {
    **{f"forbid{i}": ("forbid", None, 1.5) for i in range(4)},
    **{f"allow{i}": ("allow", None, 1.2) for i in range(4)},
    **{f"keyed{i}": ("allow", f"k{i % 2}", 0.3) for i in range(4)},
}


class Fleet:
    """The workload's files, its tasks added, and three daemons on the cluster's URL."""

    def __init__(self, cluster: PatroniCluster, root: Path, spawn: Any, cli: Any) -> None:
        self.url = cluster.url()
        self.cli = cli
        self.jobs = root / "jobs.log"
        self.overlaps = root / "overlaps"
        self.locks = root / "locks"
        self.locks.mkdir()
        for path in (self.jobs, self.overlaps):
            path.touch()
        job = root / "job"
        job.write_text(JOB)
        job.chmod(0o755)
        for name, (overlap, key, seconds) in TASKS.items():
            lock = (
                [str(self.locks / f"key-{key}")]
                if key
                else [str(self.locks / f"task-{name}")]
                if overlap == "forbid"
                else []
            )
            command = " ".join([str(job), str(self.jobs), str(self.overlaps), str(seconds), *lock])
            extra = ["--concurrency-key", key] if key else []
            added = cli(
                "tasks", "add", name, "--every", "1s", "--overlap", overlap, *extra,
                "--command", command, url=self.url,
            )  # fmt: skip
            assert added.code == 0, added.err
        self.daemons = [spawn(self.url, f"d{i}", "--concurrency", "8") for i in range(3)]
        for daemon in self.daemons:
            daemon.instance_id(timeout=60)

    def running(self, at_least: int) -> list[dict[str, Any]]:
        """The running runs, once there are at least `at_least` of them (else none)."""
        rows = query(self.url, "SELECT id, owner FROM run WHERE status = 'running' ORDER BY id")
        return rows if len(rows) >= at_least else []

    def back_at_work(self, since: Any) -> None:
        """Until runs that started 2 s after `since` (the promotion) have succeeded, a keyed
        and a forbid one among them."""

        def done() -> bool:
            rows = query(
                self.url,
                "SELECT DISTINCT t.name FROM run r JOIN occurrence o ON o.id = r.occurrence_id"
                " JOIN task t ON t.id = o.task_id"
                " WHERE r.status = 'success' AND r.started_at > %s + interval '2 s'",
                (since,),
            )
            names = {r["name"] for r in rows}
            return any(n.startswith("keyed") for n in names) and any(
                n.startswith("forbid") for n in names
            )

        wait_for(done, timeout=60, interval=0.2, message="the fleet to run jobs again")

    def lines(self) -> list[dict[str, str]]:
        """The job log, one dict per job start, in the order the jobs started."""
        rows = []
        for line in self.jobs.read_text().splitlines():
            values = line.split("\t")
            assert len(values) == len(FIELDS), f"malformed job line: {line!r}"
            rows.append(dict(zip(FIELDS, values, strict=True)))
        return rows

    def events(self, name: str) -> list[dict[str, Any]]:
        """The daemons' JSON log events called `name`."""
        found = []
        for daemon in self.daemons:
            for line in daemon.log().splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict) and event.get("event") == name:
                    found.append({"daemon": daemon.name, **event})
        return found

    def problems(self) -> list[str]:
        """What the job's OS locks, `audit` and the daemons' exit codes found wrong."""
        found = []
        overlaps = self.overlaps.read_text()
        if overlaps:
            found.append(f"jobs overlapped (OS locks):\n{overlaps}")
        audit = self.cli("audit", url=self.url)
        if audit.code != 0:
            found.append(f"audit exited {audit.code}:\n{audit.out}{audit.err}")
        found += [
            f"{daemon.name} exited {daemon.proc.returncode}"
            for daemon in self.daemons
            if daemon.proc.poll() is not None
        ]
        return found


def _now(url: str) -> Any:
    return query(url, "SELECT now() AS t")[0]["t"]


def test_a_patronictl_switchover_under_load_takes_no_run_over_and_every_kept_outcome_lands(
    patroni: PatroniCluster, spawn: Any, cli: Any, tmp_path: Path
) -> None:
    started = time.monotonic()
    fleet = Fleet(patroni, tmp_path, spawn, cli)
    old_leader = patroni.leader()
    assert old_leader is not None
    timeline = patroni.timeline(old_leader)
    running = wait_for(lambda: fleet.running(5), timeout=30, message="at least 5 runs running")
    switched = time.monotonic()
    new_leader = patroni.switchover()
    switch_seconds = time.monotonic() - switched
    assert new_leader is not old_leader
    assert patroni.timeline(new_leader) == timeline + 1
    promoted_at = _now(fleet.url)
    fleet.back_at_work(promoted_at)
    time.sleep(SETTLE)  # a takeover of a run live at the switchover would have happened by now

    taken = query(
        fleet.url, "SELECT id, owner, finished_by, error FROM run WHERE error LIKE 'taken over%'"
    )
    assert taken == [], f"runs taken over after the switchover: {taken}"
    refused = fleet.events("run_fenced")
    assert refused == [], f"writes refused after the switchover: {refused}"
    ended = query(
        fleet.url,
        "SELECT id, owner, finished_by, status FROM run WHERE id = ANY(%s) ORDER BY id",
        ([r["id"] for r in running],),
    )
    assert len(ended) == len(running)
    unfinished = [r for r in ended if r["finished_by"] is None]
    assert unfinished == [], f"runs still running long after the switchover: {unfinished}"
    strangers = [r for r in ended if r["finished_by"] != r["owner"]]
    assert strangers == [], f"runs ended by someone other than their owner: {strangers}"
    problems = fleet.problems()
    assert problems == [], "\n".join(problems)
    print(
        f"switchover: {len(running)} runs running at it, patronictl + promotion"
        f" {switch_seconds:.1f} s, test {time.monotonic() - started:.1f} s"
    )


def test_an_unplanned_leader_loss_promotes_the_replica_and_no_firing_runs_beside_its_twin(
    patroni: PatroniCluster, spawn: Any, cli: Any, tmp_path: Path
) -> None:
    started = time.monotonic()
    fleet = Fleet(patroni, tmp_path, spawn, cli)
    leader, replica = patroni.leader(), patroni.replica()
    assert leader is not None
    timeline = patroni.timeline(leader)
    wait_for(lambda: fleet.running(5), timeout=30, message="at least 5 runs running")
    patroni.stall_replication()
    time.sleep(LAG)  # the fleet commits on the leader alone
    killed_at = time.monotonic()
    assert patroni.kill_leader() is leader
    patroni.drop_stalled_stream()  # what the leader sent during the stall is lost with it
    patroni.wait_leader(replica, timeout=60)
    failover_seconds = time.monotonic() - killed_at
    assert patroni.timeline(replica) == timeline + 1
    promoted_at = _now(fleet.url)
    fleet.back_at_work(promoted_at)
    # Every run the new primary inherited as running has ended (taken over after the quiet
    # period, or completed by its owner), and its rerun had time to start.
    wait_for(
        lambda: (
            not query(
                fleet.url,
                "SELECT 1 FROM run WHERE status = 'running' AND started_at < %s",
                (promoted_at,),
            )
        ),
        timeout=60,
        interval=0.2,
        message="the runs inherited as running to end",
    )
    time.sleep(SETTLE)

    lines = fleet.lines()
    recorded = {
        (r["name"], r["at"].astimezone(UTC).isoformat(), str(r["token"]), str(r["id"]))
        for r in query(
            fleet.url,
            "SELECT t.name, o.scheduled_for AS at, r.lease_token AS token, r.id FROM run r"
            " JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id",
        )
    }
    lost = [
        line
        for line in lines
        if (line["task"], line["scheduled_for"], line["token"], line["run"]) not in recorded
    ]
    firings_of_key: dict[str, set[tuple[str, str]]] = defaultdict(set)
    tokens_of_firing: dict[tuple[str, str], list[int]] = defaultdict(list)
    for line in lines:
        firing = (line["task"], line["scheduled_for"])
        firings_of_key[line["key"]].add(firing)
        tokens_of_firing[firing].append(int(line["token"]))
    again = sum(1 for tokens in tokens_of_firing.values() if len(tokens) > 1)
    problems = fleet.problems()  # before the print: the cli fixture's capsys reads stdout
    print(
        f"leader loss: failover {failover_seconds:.1f} s, {len(lines)} job starts,"
        f" {len(lost)} runs the new primary lacks, {again} firings started twice,"
        f" test {time.monotonic() - started:.1f} s"
    )
    # The test entered its window: the promotion lost runs whose jobs had started.
    assert len(lost) >= LOST, f"only {len(lost)} runs lost: the failover lost too little"

    shared = {key: sorted(f) for key, f in firings_of_key.items() if len(f) > 1}
    if shared:
        problems.append(f"{len(shared)} idempotency keys given to two firings: {shared}")
    unordered = {
        firing: tokens
        for firing, tokens in tokens_of_firing.items()
        if any(later <= earlier for earlier, later in itertools.pairwise(tokens))
    }
    if unordered:
        problems.append(
            f"{len(unordered)} firings whose later attempt's token is not higher: {unordered}"
        )
    assert problems == [], "\n".join(problems)
