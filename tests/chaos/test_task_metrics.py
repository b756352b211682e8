"""The per-task gauges end to end: a real daemon's /metrics over rows its own runs wrote (a task
that succeeds on its schedule, one that failed twice, one whose manual firing was skipped while
it ran, one past --metrics-task-limit), each value checked against the database, and the sample
cached between scrapes then read again; a second replica serves the same values."""

import math
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.test_endpoint import scrape
from tests.support import free_port, http_get, query, wait_for

pytestmark = pytest.mark.slow


def _by_task(samples: dict[str, list[Any]], name: str) -> dict[tuple[str, ...], float]:
    """A per-task family's values by its labels' values (task, or task and reason)."""
    return {
        tuple(s.labels[k] for k in ("task", "reason") if k in s.labels): s.value
        for s in samples.get(f"scheduler_daemon_task_{name}", [])
    }


def _epochs(url: str, sql: str, task: str) -> set[float]:
    rows = query(url, sql, {"task": task})
    return {float(r["e"]) for r in rows}


def _outcomes(url: str, task: str, status: str) -> int:
    rows = query(
        url,
        "SELECT count(*) AS n FROM occurrence o JOIN task t ON t.id = o.task_id "
        "WHERE t.name = %(task)s AND o.status = %(status)s",
        {"task": task, "status": status},
    )
    return int(rows[0]["n"])


def test_a_daemon_serves_each_task_s_gauges_from_the_database(
    spawn, cli, database_url, tmp_path: Path
) -> None:
    url = database_url
    release = tmp_path / "release"
    hold = f"while [ ! -e {release} ]; do sleep 0.05; done"
    # Ids in this order: the first three keep their names, `spare` is past the limit.
    for name, every, command in [
        ("ok", "2s", "true"),
        ("bad", "1h", "false"),
        ("held", "1h", hold),
        ("spare", "1h", "false"),
    ]:
        added = cli("tasks", "add", name, "--every", every, "--command", command, url=url)
        assert added.code == 0, added.err
    port = free_port()
    daemon = spawn(url, "tasks", "--http-port", str(port), "--metrics-task-limit", "3")
    daemon.instance_id()

    def ran(task: str, status: str, count: int) -> None:
        wait_for(lambda: _outcomes(url, task, status) >= count, message=f"{task} {status}")

    for count in (1, 2):
        assert cli("tasks", "trigger", "bad", url=url).code == 0
        ran("bad", "failed", count)
    assert cli("tasks", "trigger", "spare", url=url).code == 0
    ran("spare", "failed", 1)
    assert cli("tasks", "trigger", "held", url=url).code == 0
    ran("held", "running", 1)
    skipped = cli("tasks", "trigger", "held", url=url)
    assert "skipped: overlap" in skipped.out, skipped.out
    ran("ok", "success", 1)

    samples = scrape(port)  # the first scrape: the first sample is read now
    (age,) = samples["scheduler_daemon_task_sample_age_seconds"]
    assert 0 <= age.value < 15

    failures = _by_task(samples, "consecutive_failures")
    assert failures == {("ok",): 0, ("bad",): 2, ("held",): 0, ("_other",): 1}
    assert _by_task(samples, "running") == {("ok",): 0, ("bad",): 0, ("held",): 1, ("_other",): 0}
    lost = _by_task(samples, "lost_firings")
    assert lost == {("held", "overlap"): 1}

    # Times are the database's own: the scrape's value is one the rows hold.
    success = _by_task(samples, "last_success_timestamp_seconds")
    assert set(success) == {("ok",)}  # bad never succeeded; _other has no times
    successes = _epochs(
        url,
        "SELECT extract(epoch FROM o.finished_at)::float8 AS e FROM occurrence o "
        "JOIN task t ON t.id = o.task_id WHERE t.name = %(task)s AND o.status = 'success'",
        "ok",
    )
    assert success[("ok",)] in successes
    fired = _by_task(samples, "last_schedule_timestamp_seconds")
    assert set(fired) == {("ok",)}  # the others only ran by hand
    firings = _epochs(
        url,
        "SELECT extract(epoch FROM o.scheduled_for)::float8 AS e FROM occurrence o "
        "JOIN task t ON t.id = o.task_id WHERE t.name = %(task)s AND o.trigger = 'schedule'",
        "ok",
    )
    assert fired[("ok",)] in firings
    following = _by_task(samples, "next_schedule_timestamp_seconds")
    assert set(following) == {("ok",), ("bad",), ("held",)}
    assert following[("ok",)] > fired[("ok",)]
    (bad_next,) = _epochs(
        url,
        "SELECT extract(epoch FROM next_run_at)::float8 AS e FROM task WHERE name = %(task)s",
        "bad",
    )
    assert math.isclose(following[("bad",)], bad_next)
    names = {s.labels.get("task") for series in samples.values() for s in series}
    assert "spare" not in names

    # A third failure: the next scrape within 15 s serves the cached sample, a later one reads.
    assert cli("tasks", "trigger", "bad", url=url).code == 0
    ran("bad", "failed", 3)
    cached = scrape(port)
    (age,) = cached["scheduler_daemon_task_sample_age_seconds"]
    assert age.value < 15, "the sample was read again too soon to show the cache"
    assert _by_task(cached, "consecutive_failures")[("bad",)] == 2
    latest = wait_for(
        lambda: (
            (found := scrape(port))
            and _by_task(found, "consecutive_failures")[("bad",)] == 3
            and found
        ),
        timeout=40,
        interval=1,
        message="the next sample to show the third failure",
    )

    # A second replica reads the same rows: the same values (hence `max by (task)`).
    peer_port = free_port()
    peer = spawn(url, "peer", "--http-port", str(peer_port), "--metrics-task-limit", "3")
    peer.instance_id()
    peer_samples = wait_for(  # served empty until its sample's connection is set up
        lambda: (found := scrape(peer_port)) and _by_task(found, "running") and found,
        message="the peer's first sample",
    )
    for name in ("consecutive_failures", "running", "lost_firings"):  # `ok` runs meanwhile
        theirs, ours = _by_task(peer_samples, name), _by_task(latest, name)
        assert {k: v for k, v in theirs.items() if k[0] != "ok"} == {
            k: v for k, v in ours.items() if k[0] != "ok"
        }, name
    peer_next = _by_task(peer_samples, "next_schedule_timestamp_seconds")
    assert peer_next[("bad",)] == _by_task(latest, "next_schedule_timestamp_seconds")[("bad",)]
    assert peer.stop() == 0, peer.log()

    release.touch()
    assert daemon.stop() == 0, daemon.log()
    assert http_get(port, "/healthz")[0] == 0
