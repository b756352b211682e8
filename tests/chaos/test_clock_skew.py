"""No coordination decision reads a daemon's clock: daemons an hour ahead and an hour behind
(libfaketime) beside a normal one fire nothing early, nothing late beyond a poll, and take
nothing over early."""

import time
from datetime import timedelta
from pathlib import Path

import pytest

from tests.support import query

pytestmark = pytest.mark.slow
POLL = timedelta(milliseconds=200)  # tests.support.FAST
SLACK = timedelta(milliseconds=800)  # scheduling on a loaded 2-core machine
SKEWS = {"ahead": "+1h", "behind": "-1h", "normal": None}


# Preloaded directly (not through the `faketime` wrapper, which does not pass SIGTERM on).
LIBFAKETIME = next(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"), None)


def _skewed(offset: str | None) -> dict[str, str]:
    if offset is None:
        return {}
    return {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


@pytest.mark.skipif(LIBFAKETIME is None, reason="needs libfaketime (apt: faketime)")
def test_daemons_an_hour_apart_fire_on_the_database_clock_and_take_nothing_over(
    spawn, cli, database_url
) -> None:
    for i in range(6):
        assert cli("tasks", "add", f"tick{i}", "--every", "1s", "--command", "true").code == 0
    # Jobs longer than the lease TTL (3 s): only renewals keep them; a skewed clock in any
    # lease arithmetic would let a peer take them over early.
    for i in range(3):
        assert cli("tasks", "add", f"long{i}", "--every", "1h", "--command", "sleep 6").code == 0
    daemons = {
        name: spawn(database_url, name, env=_skewed(offset)) for name, offset in SKEWS.items()
    }
    ids = {name: d.instance_id() for name, d in daemons.items()}
    # Firings due while the daemons were still starting are late by the start-up, not by a
    # clock: lateness is judged from here on (on a loaded machine start-up takes seconds).
    (all_up,) = query(database_url, "SELECT now() AS t")
    for i in range(3):
        cli("tasks", "trigger", f"long{i}")
    status = cli("status", "--json").json()
    drift = {i["id"]: i["clock_drift_seconds"] for i in status["instances"]}
    assert drift[ids["ahead"]] == pytest.approx(-3600, abs=5)  # database minus host clock
    assert drift[ids["behind"]] == pytest.approx(3600, abs=5)
    assert drift[ids["normal"]] == pytest.approx(0, abs=5)
    time.sleep(12)  # the workload; the verdict reads the run history
    for d in daemons.values():
        assert d.stop() == 0, d.log()

    runs = query(
        database_url,
        """
        SELECT r.owner, r.status, r.started_at, o.scheduled_for, o.trigger, t.name
        FROM run r JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id""",
    )
    scheduled = [
        r for r in runs if r["trigger"] == "schedule" and r["scheduled_for"] >= all_up["t"]
    ]
    lateness = [r["started_at"] - r["scheduled_for"] for r in scheduled]
    print(
        f"{len(scheduled)} scheduled runs; lateness min {min(lateness)} max {max(lateness)}; "
        f"per instance { ({n: sum(r['owner'] == i for r in runs) for n, i in ids.items()}) }"
    )
    assert min(lateness) >= timedelta(0), "a firing started before its time"
    assert max(lateness) <= POLL + SLACK, "a firing started later than one poll"
    assert all(any(r["owner"] == i for r in scheduled) for i in ids.values())
    long_runs = [r for r in runs if r["name"].startswith("long")]
    assert [r["status"] for r in long_runs] == ["success"] * 3, "a long run was taken over"
    assert query(database_url, "SELECT id FROM run WHERE status = 'interrupted'") == []
