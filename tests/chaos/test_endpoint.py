"""A real daemon's HTTP endpoint: /metrics parsed as Prometheus exposition, /healthz that ignores
the database, /readyz that follows it and the drain."""

import signal
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scheduler_daemon.storage import migration
from tests.support import OUTAGE_STEPS_TIMEOUT, free_port, http_get, query, wait_for

pytestmark = pytest.mark.slow
# Every label a series may carry: bounded sets only, never an occurrence or run id. `part`
# (waker, endpoint, pruner) names a side part that degrades (ADR 0005); `task` (capped by
# --metrics-task-limit) and `reason` (LostReason) are the per-task gauges' (ADR 0013).
ALLOWED_LABELS = {"status", "executor", "stage", "kind", "part", "instance_id", "version"}
ALLOWED_LABELS |= {"task", "reason"}


def scrape(port: int) -> dict[str, list[Any]]:
    """Samples by name (the exposition must parse)."""
    code, body = http_get(port, "/metrics")
    assert code == 200, body
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def value(samples: dict[str, list[Any]], name: str, **labels: str) -> float:
    matching = [s.value for s in samples.get(name, []) if labels.items() <= s.labels.items()]
    assert len(matching) == 1, (name, labels, samples.get(name))
    return matching[0]


def test_metrics_health_and_readiness_of_a_real_daemon(
    spawn, owned_server, cli, tmp_path: Path
) -> None:
    owned_server.start()
    url = owned_server.url
    migration.upgrade(url)
    port = free_port()
    release = tmp_path / "release"
    cli("tasks", "add", "quick", "--every", "1h", "--command", "true", url=url)
    hold = f"while [ ! -e {release} ]; do sleep 0.05; done"
    cli("tasks", "add", "held", "--every", "1h", "--command", hold, url=url)
    daemon = spawn(
        url, "probed", "--http-port", str(port), "--drain-timeout", "20s", "--stop-timeout", "30s"
    )
    daemon.instance_id()
    wait_for(lambda: http_get(port, "/readyz") == (200, "ready\n"), message="ready")
    assert http_get(port, "/healthz") == (200, "ok\n")
    assert http_get(port, "/nowhere")[0] == 404

    cli("tasks", "trigger", "quick", url=url)
    wait_for(lambda: query(url, "SELECT 1 FROM run WHERE status = 'success'"), message="a run")
    samples = wait_for(
        lambda: (
            (s := scrape(port))
            and value(s, "scheduler_daemon_lease_renewals_total") > 0
            and value(s, "scheduler_daemon_runs_finished_total", status="success") == 1
            # The gauge is sampled apart from the counters: a sample taken while a firing was
            # still queued shows 1 until the next (a loaded CI run saw it).
            and value(s, "scheduler_daemon_queue_depth") == 0
            and s
        ),
        message="the renewal, the outcome and an empty queue in the metrics",
    )
    assert value(samples, "scheduler_daemon_occurrences_claimed_total") == 1
    assert value(samples, "scheduler_daemon_runs_started_total", executor="shell") == 1
    assert value(samples, "scheduler_daemon_run_start_lag_seconds_count", executor="shell") == 1
    duration = "scheduler_daemon_run_duration_seconds_count"
    assert value(samples, duration, status="success", executor="shell") == 1
    assert value(samples, "scheduler_daemon_loop_iteration_seconds_count") > 0
    assert value(samples, "scheduler_daemon_max_concurrent_runs") == 16  # the default budget
    assert value(samples, "scheduler_daemon_queue_depth") == 0
    assert value(samples, "scheduler_daemon_concurrency") == 4
    assert value(samples, "scheduler_daemon_fenced_writes_total", stage="renewal") == 0
    (info,) = samples["scheduler_daemon_info"]
    assert info.labels["instance_id"] == daemon.instance_id()
    ours = {
        k
        for name, series in samples.items()
        if name.startswith("scheduler_daemon_")
        for s in series
        for k in s.labels
        if k not in ("le",)
    }
    assert ours <= ALLOWED_LABELS, ours

    # The database goes away: not ready, still alive (it keeps outcomes in memory meanwhile).
    owned_server.stop()
    _, reason = wait_for(
        lambda: (r := http_get(port, "/readyz"))[0] == 503 and r, message="not ready"
    )
    assert reason.count("\n") == 1, reason
    assert "cannot connect to the database" in reason, reason
    failed = daemon.log().count('"pass_failed"')
    wait_for(
        lambda: daemon.log().count('"pass_failed"') >= failed + 3,
        timeout=OUTAGE_STEPS_TIMEOUT,
        message="several passes to fail during the outage",
    )
    assert http_get(port, "/healthz") == (200, "ok\n")
    assert daemon.proc.poll() is None
    errors = value(scrape(port), "scheduler_daemon_database_errors_total", kind="unavailable")
    assert errors >= 3
    owned_server.start()
    wait_for(lambda: http_get(port, "/readyz") == (200, "ready\n"), message="ready again")

    # Draining: not ready, still alive, until the held job is released.
    cli("tasks", "trigger", "held", url=url)
    wait_for(lambda: query(url, "SELECT 1 FROM run WHERE status = 'running'"), message="held job")
    daemon.signal(signal.SIGTERM)
    wait_for(lambda: http_get(port, "/readyz") == (503, "draining\n"), message="draining")
    assert http_get(port, "/healthz") == (200, "ok\n")
    assert value(scrape(port), "scheduler_daemon_draining") == 1
    release.touch()
    assert daemon.proc.wait(30) == 0, daemon.log()
    assert query(url, "SELECT status FROM run ORDER BY id DESC LIMIT 1") == [{"status": "success"}]
    assert http_get(port, "/healthz")[0] == 0  # the endpoint went away with the process


def test_a_port_in_use_is_refused_with_one_line(spawn, database_url, tmp_path) -> None:
    port = free_port()
    first = spawn(database_url, "first", "--http-port", str(port))
    wait_for(lambda: http_get(port, "/healthz")[0] == 200, message="the first endpoint")
    second = spawn(database_url, "second", "--http-port", str(port))
    assert second.proc.wait(30) == 2
    lines = [line for line in second.log().splitlines() if line.startswith("error:")]
    assert lines == [
        f"error: --http-host 127.0.0.1 --http-port {port}: cannot listen: Address already in use"
    ]
    assert first.stop() == 0
