"""A planned switchover with a gap longer than TTL + grace, under three real daemons given the
pair's multi-host URL: after the promotion no run is taken over, live or finished; every run that
was running when the primary stopped is ended by its own owner, whose kept outcome lands (issue
32, item 1: the fleet's first sighting of the new epoch starts a quiet period, revision 0018).

Fails on b182703 (before revision 0018): the new primary's postmaster started long before the
promotion, so every run whose takeover point passed during the gap was taken over by the first
reconcile pass after it, 0.1-0.8 s after the promotion, and the owners' kept outcomes were
refused."""

import time

from tests.ha.pair import ReplicationPair
from tests.support import query, wait_for

TTL, GRACE = 3.0, 1.0  # tests.support.FAST
GAP = TTL + GRACE + 2.0


def _running(url: str, at_least: int = 0) -> list[dict] | None:
    """The running runs, once there are at least `at_least` of them."""
    rows = query(url, "SELECT id, owner FROM run WHERE status = 'running' ORDER BY id")
    return rows if len(rows) >= at_least else None


def test_a_switchover_with_a_gap_takes_no_run_over_and_every_kept_outcome_lands(
    pair: ReplicationPair, spawn, cli
) -> None:
    url = pair.url()
    for i in range(6):
        added = cli(
            "tasks", "add", f"t{i}", "--every", "1s", "--command", "sleep 1.5",
            "--overlap", "allow", url=url,
        )  # fmt: skip
        assert added.code == 0, added.err
    daemons = [spawn(url, f"d{i}") for i in range(3)]
    for daemon in daemons:
        daemon.instance_id()
    running = wait_for(
        lambda: _running(url, at_least=5),
        timeout=30,
        message="at least 5 runs running",
    )
    pair.wait_replayed()
    stopped_at = time.monotonic()
    pair.switchover(GAP)
    assert time.monotonic() - stopped_at > TTL + GRACE  # the gap outlived every lease
    ((promoted_at,),) = [tuple(r.values()) for r in query(url, "SELECT now() AS t")]
    # The fleet back at work on the new primary: runs that started after the promotion ended.
    wait_for(
        lambda: query(
            url,
            "SELECT 1 FROM run WHERE status = 'success' AND started_at > %s + interval '2 s'",
            (promoted_at,),
        ),
        timeout=60,
        message="the fleet to run jobs again on the new primary",
    )
    time.sleep(TTL + GRACE + 2)  # past any quiet period: a takeover would have happened by now
    taken = query(
        url, "SELECT id, owner, finished_by, error FROM run WHERE error LIKE 'taken over%'"
    )
    assert taken == [], f"runs taken over after the switchover: {taken}"
    ids = [r["id"] for r in running]
    ended = query(
        url,
        "SELECT id, owner, finished_by, status FROM run WHERE id = ANY(%s) ORDER BY id",
        (ids,),
    )
    unfinished = [r for r in ended if r["finished_by"] is None]
    assert unfinished == [], f"runs still running long after the switchover: {unfinished}"
    strangers = [r for r in ended if r["finished_by"] != r["owner"]]
    assert strangers == [], f"runs ended by someone other than their owner: {strangers}"
    epochs = query(url, "SELECT timeline FROM fleet_epoch ORDER BY timeline")
    assert [e["timeline"] for e in epochs] == [1, 2]  # both sightings, the promotion's recorded
    database = cli("status", "--json", url=url).json()["database"]
    assert (database["timeline"], database["in_recovery"]) == (2, False)
    assert database["last_failover_seen_at"] is not None
    audit = cli("audit", url=url)
    assert audit.code == 0, audit.out + audit.err
    for daemon in daemons:
        assert daemon.proc.poll() is None, f"{daemon.name} exited {daemon.proc.returncode}"
