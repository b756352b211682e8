"""Three real daemons share dozens of per-second tasks through the database alone.

The verdict comes from the database history: every expected firing ran exactly once (or was
skipped for overlap, with that reason), no two runs of a `forbid` task overlapped, per-key FIFO
held, executing runs never exceeded the fleet budget, and nothing was left claimed. The daemons
run as the daemon role and the tasks are defined as the operator role (`db roles`), so a grant
the code needs and the roles lack fails the test.
"""

import time
from datetime import timedelta
from itertools import pairwise

import pytest

from tests.role_fleet import role_fleet
from tests.support import query

pytestmark = pytest.mark.slow
BUDGET = 6
RUN_SECONDS = 20
SETTLE = timedelta(seconds=4)  # firings this close to the stop may legitimately still be queued


def _tasks(cli, url: str) -> dict[str, str]:
    """name → overlap policy."""
    specs = {}
    for i in range(8):
        specs[f"quick-{i}"] = ("forbid", ("--every", "1s", "--command", "sleep 0.2"))
    for i in range(4):
        specs[f"slow-{i}"] = ("forbid", ("--every", "1s", "--command", "sleep 1.5"))
    for i in range(6):
        specs[f"queued-{i}"] = ("queue", ("--every", "2s", "--command", "sleep 0.2"))
    for i in range(6):
        key = f"k{i % 2}"
        specs[f"keyed-{i}"] = (
            "allow",
            ("--every", "1s", "--command", "sleep 0.05", "--concurrency-key", key),
        )
    for name, (overlap, args) in specs.items():
        result = cli("tasks", "add", name, *args, "--overlap", overlap, url=url)
        assert result.code == 0, result.err
    return {name: overlap for name, (overlap, _) in specs.items()}


def _max_concurrency(intervals: list[tuple]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(f, -1) for _, f in intervals])
    level = peak = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak


def test_three_daemons_run_every_firing_exactly_once_within_policy_and_budget(
    spawn, cli, database_url, tmp_path
) -> None:
    with role_fleet(database_url) as roles:
        assert (
            cli("config", "set", "max-concurrent-runs", str(BUDGET), url=roles.operator).code == 0
        )
        overlap = _tasks(cli, roles.operator)
        daemons = [spawn(roles.daemon, f"d{i}", "--concurrency", "4") for i in range(3)]
        try:
            ids = [d.instance_id() for d in daemons]
            time.sleep(RUN_SECONDS)  # the workload itself; the verdict below reads the history
        finally:
            for d in daemons:
                assert d.stop() == 0, d.log()
        for d in daemons:
            assert "permission denied" not in d.log(), d.log()
    (stop,) = query(database_url, "SELECT now() AS t")
    cutoff = stop["t"] - SETTLE

    occurrences = query(
        database_url,
        """
        SELECT o.*, t.name, t.anchor_at, t.every FROM occurrence o JOIN task t ON t.id = o.task_id
        WHERE o.scheduled_for <= %s ORDER BY o.id""",
        (cutoff,),
    )
    runs = query(
        database_url,
        """
        SELECT r.*, o.task_id, o.concurrency_key, o.scheduled_for, o.id AS occ_id, t.name
        FROM run r JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id
        ORDER BY r.started_at""",
    )

    _assert_every_firing_accounted_for(overlap, occurrences, runs, cutoff)
    _assert_exactly_once(occurrences, runs)
    _assert_forbid_never_overlapped(overlap, runs)
    _assert_per_key_fifo(runs)

    # The budget held fleet-wide, and the work was shared.
    peak = _max_concurrency([(r["started_at"], r["finished_at"]) for r in runs])
    print(
        f"{len(runs)} runs, peak concurrency {peak} (budget {BUDGET}), per instance "
        f"{ {i: sum(r['owner'] == i for r in runs) for i in ids} }"
    )
    assert peak <= BUDGET
    assert all(any(r["owner"] == i for r in runs) for i in ids)

    # Nothing left claimed or running.
    assert (
        query(database_url, "SELECT id FROM occurrence WHERE status IN ('launching', 'running')")
        == []
    )
    assert query(database_url, "SELECT id FROM run WHERE status = 'running'") == []


def _assert_every_firing_accounted_for(overlap, occurrences, runs, cutoff) -> None:
    """Fire times anchor + k*every up to the cutoff each have one occurrence that succeeded or
    was skipped for overlap (forbid only)."""
    first_start = min(r["started_at"] for r in runs)
    for name, policy in overlap.items():
        rows = [o for o in occurrences if o["name"] == name]
        assert rows, f"{name} never fired"
        anchor, every = rows[0]["anchor_at"], rows[0]["every"]
        expected, k = set(), 1
        while anchor + k * every <= cutoff:
            if anchor + k * every >= first_start:
                expected.add(anchor + k * every)
            k += 1
        got = {o["scheduled_for"] for o in rows}
        assert expected <= got, f"{name} missed firings {sorted(expected - got)[:3]}"
        for o in rows:
            if o["status"] == "skipped":
                assert (policy, o["reason"]) == ("forbid", "overlap"), o
            else:
                assert o["status"] == "success", o


def _assert_exactly_once(occurrences, runs) -> None:
    """One run per successful occurrence, and it succeeded: nothing ran twice."""
    by_occurrence: dict[int, list] = {}
    for r in runs:
        by_occurrence.setdefault(r["occ_id"], []).append(r["status"])
    for o in occurrences:
        if o["status"] == "success":
            assert by_occurrence[o["id"]] == ["success"], o


def _assert_forbid_never_overlapped(overlap, runs) -> None:
    for name, policy in overlap.items():
        if policy == "forbid":
            spans = sorted((r["started_at"], r["finished_at"]) for r in runs if r["name"] == name)
            for (_, end), (start, _) in pairwise(spans):
                assert end <= start, f"{name} runs overlapped"


def _assert_per_key_fifo(runs) -> None:
    """Runs of one concurrency key start in firing order and never overlap."""
    for key in ("k0", "k1"):
        keyed = [r for r in runs if r["concurrency_key"] == key]
        order = [(r["scheduled_for"], r["occ_id"]) for r in keyed]
        assert order == sorted(order), f"key {key} ran out of order"
        assert _max_concurrency([(r["started_at"], r["finished_at"]) for r in keyed]) == 1
