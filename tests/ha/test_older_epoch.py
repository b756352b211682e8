"""A daemon that reaches a former primary, on an older timeline than it has seen, treats it as an
outage (issue 32, item 4): it writes nothing there, logs `database_epoch_older` at most once a
minute, counts it, stays alive, and resumes on the new primary when it comes back. On the way it
shows the reconnect after a promotion (item 3): renewals, kept outcomes and non-exclusive claims
resume within one renewal interval at defaults (3 s) of it.

Fails on 2a764ea: its connections were used as they came, so the daemon took the old primary for
the database: it heartbeat, claimed and ran there (its row counts and the instance row changed)."""

import re
import time
from datetime import datetime

from tests.ha.pair import ReplicationPair, server_url
from tests.support import free_port, http_get, query, wait_for

TTL = 3.0  # tests.support.FAST; the renewal interval is TTL / 3
RENEW_INTERVAL = TTL / 3
WATCHED = ("task", "occurrence", "run", "instance", "fleet_epoch")


def _rows(url: str) -> dict[str, list[dict]]:
    return {t: query(url, f"SELECT * FROM {t} ORDER BY 1") for t in WATCHED}


def _metric(port: int, name: str) -> float:
    _, body = http_get(port, "/metrics")
    match = re.search(rf"^{name} (\S+)$", body, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def _resumed(url: str, since: datetime, what: str) -> float:
    """Seconds after `since` (database clock) at which `what` first happened on `url`."""
    sql = {
        "renewal": "SELECT min(lease_expires_at - interval '3 s') AS t FROM run"
        " WHERE lease_expires_at - interval '3 s' > %(s)s",
        "outcome": "SELECT min(finished_at) AS t FROM run WHERE finished_at > %(s)s",
        "claim": "SELECT min(started_at) AS t FROM run WHERE started_at > %(s)s",
    }[what]
    at = wait_for(lambda: query(url, sql, {"s": since})[0]["t"], timeout=30, message=what)
    return (at - since).total_seconds()


def test_a_former_primary_on_an_older_timeline_is_an_outage_not_a_database(
    pair: ReplicationPair, spawn, cli
) -> None:
    url = pair.url()
    old_primary, new_primary = pair.primary, pair.standby
    assert new_primary is not None
    # `quick` may overlap: after a promotion exclusive claims wait out the longest lease (ADR
    # 0008), and it is the non-exclusive claims that resume at once.
    for name, every, command, overlap in (
        ("held", "1h", "sleep 30", "forbid"),
        ("quick", "1s", "sleep 0.5", "allow"),
    ):
        added = cli(
            "tasks", "add", name, "--every", every, "--command", command, "--overlap", overlap,
            url=url,
        )  # fmt: skip
        assert added.code == 0, added.err
    assert cli("tasks", "trigger", "held", url=url).code == 0
    http_port = free_port()
    daemon = spawn(url, "d", "--http-port", str(http_port))
    daemon.instance_id()
    wait_for(lambda: query(url, "SELECT 1 FROM run WHERE status = 'success'"), message="a run")
    pair.wait_replayed()

    # A planned switchover: the daemon reaches timeline 2 and is back at work within one
    # renewal interval of the promotion (the lease keeper renews as soon as it reconnects).
    pair.switchover(1.0)
    ((promoted_at,),) = [tuple(r.values()) for r in query(url, "SELECT now() AS t")]
    resumed = {w: _resumed(url, promoted_at, w) for w in ("renewal", "outcome", "claim")}
    print(f"resumed after the promotion (s): {resumed}")  # reported: pytest -s
    assert all(s < RENEW_INTERVAL * 3 for s in resumed.values()), resumed
    wait_for(
        lambda: query(url, "SELECT 1 FROM fleet_epoch WHERE timeline = 2"),
        message="the sighting of timeline 2",
    )
    assert '"database_epoch_new"' in daemon.log()

    # The new primary goes away and the old one (timeline 1, read-write) comes back on a port
    # the URL lists. Its rows are read first where no daemon can reach it.
    new_port = new_primary.port
    pair.primary.stop()
    stale_url = pair.start_isolated(old_primary)
    before = _rows(stale_url)
    old_primary.stop()
    assert pair.start_listed(old_primary, pair.ports[0]) == server_url(old_primary)
    stale_url = server_url(old_primary)
    time.sleep(4 * RENEW_INTERVAL + 2)  # heartbeats, renewals, passes and claims were due
    assert _rows(stale_url) == before  # nothing written on the former primary
    refused = _metric(http_port, "scheduler_daemon_database_epoch_older_total")
    time.sleep(RENEW_INTERVAL + 1)  # the daemon keeps retrying, and is refused again
    assert daemon.proc.poll() is None, daemon.log()  # an outage, not an exit
    assert daemon.log().count('"database_epoch_older"') == 1  # once a minute at most
    assert _metric(http_port, "scheduler_daemon_database_epoch_older_total") > refused >= 1
    assert _metric(http_port, "scheduler_daemon_database_timeline") == 2

    # The new primary back, the former one fenced: the daemon resumes there.
    old_primary.stop()
    new_primary.port = new_port
    new_primary.start()
    ((back_at,),) = [tuple(r.values()) for r in query(url, "SELECT now() AS t")]
    wait_for(
        lambda: query(url, "SELECT 1 FROM run WHERE finished_at > %s", (back_at,)),
        timeout=30,
        message="the daemon to work on the new primary again",
    )
    assert daemon.proc.poll() is None
