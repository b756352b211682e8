"""Real daemon processes meeting faults: the database down at start or mid-run, dropped
connections, jobs that crash or flood output, a wrong schema, contradictory settings."""

import time
import uuid
from typing import Any

import pytest

from scheduler_daemon.storage import migration
from tests.support import query, wait_for

pytestmark = pytest.mark.slow


def test_the_daemon_waits_for_a_database_that_is_down_at_start(
    spawn, owned_server, tmp_path, cli
) -> None:
    daemon = spawn(owned_server.url, "early")
    try:
        wait_for(
            lambda: "database_unavailable_at_start" in daemon.log(),
            message="the daemon to say the database is down",
        )
        assert daemon.proc.poll() is None  # still waiting, not crashed
        owned_server.start()
        migration.upgrade(owned_server.url)
        assert (
            cli(
                "tasks", "add", "t", "--every", "1h", "--command", "true", url=owned_server.url
            ).code
            == 0
        )
        assert cli("tasks", "trigger", "t", url=owned_server.url).code == 0
        wait_for(
            lambda: query(owned_server.url, "SELECT 1 FROM run WHERE status = 'success'"),
            message="the first run once the database is up",
        )
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_a_finished_jobs_outcome_is_kept_while_the_database_is_down_and_written_after(
    spawn, owned_server, tmp_path, cli
) -> None:
    owned_server.start()
    migration.upgrade(owned_server.url)
    url = owned_server.url
    cli("tasks", "add", "t", "--every", "1h", "--command", "sleep 1", url=url)
    # A long lease so the outage ends before anything could be taken over.
    daemon = spawn(url, "keeper", "--lease-ttl", "60s")
    try:
        daemon.instance_id()
        cli("tasks", "trigger", "t", url=url)
        wait_for(
            lambda: query(url, "SELECT 1 FROM run WHERE status = 'running'"),
            message="the run to start",
        )
        owned_server.stop()  # the job finishes while the database is down
        wait_for(
            lambda: "outcome_kept_for_later" in daemon.log(),
            timeout=20,
            message="the daemon to keep the outcome",
        )
        owned_server.start()
        wait_for(
            lambda: query(url, "SELECT 1 FROM run WHERE status = 'success'"),
            timeout=30,
            message="the kept outcome to be written",
        )
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_dropped_connections_mid_loop_are_reconnected(spawn, cli, database_url, tmp_path) -> None:
    cli("tasks", "add", "t", "--every", "1h", "--command", "true", "--overlap", "allow")
    daemon = spawn(database_url, "dropped")
    try:
        daemon.instance_id()
        # Its loop pool and its lease keeper connect lazily: wait until both are there.
        daemon_backends = (
            "FROM pg_stat_activity WHERE application_name LIKE "
            "'scheduler-daemon%%' AND datname = current_database()"
        )
        wait_for(
            lambda: len(query(database_url, f"SELECT pid {daemon_backends}")) >= 2,
            message="the daemon's connections",
        )
        killed = query(database_url, f"SELECT pg_terminate_backend(pid) {daemon_backends}")
        assert len(killed) >= 2
        cli("tasks", "trigger", "t")
        wait_for(
            lambda: query(database_url, "SELECT 1 FROM run WHERE status = 'success'"),
            message="a run after the connections were dropped",
        )
    finally:
        assert daemon.stop() == 0, daemon.log()


FINISHED_RUNS = """
    SELECT t.name, r.status, r.error, octet_length(r.output_tail) AS tail, r.output_tail
    FROM run r JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id
    WHERE r.status <> 'running'"""
JOBS: dict[str, tuple[str, str, str | None]] = {
    # name: (option, target, expected run error)
    "crashes": ("--command", "kill -SEGV $$", "killed by signal SIGSEGV (11)"),
    "floods": ("--command", "head -c 5000000 /dev/zero | tr '\\0' x; exit 4", "exit code 4"),
    "raises": ("--call", "tests.jobs:boom", None),
    "missing": ("--call", "no_such_module_xyz:run", None),
    "healthy": ("--command", "true", None),
    "environment": ("--command", "env", None),
}


def test_jobs_that_crash_flood_or_raise_fail_their_run_and_the_daemon_keeps_going(
    spawn, cli, database_url, tmp_path
) -> None:
    for name, (option, target, _) in JOBS.items():
        assert cli("tasks", "add", name, "--every", "1h", option, target).code == 0
    daemon = spawn(database_url, "survivor")
    try:
        daemon.instance_id()
        for name in JOBS:
            cli("tasks", "trigger", name)
        rows: Any = wait_for(
            lambda: len(r := query(database_url, FINISHED_RUNS)) == len(JOBS) and r,
            message="every job to finish",
        )
    finally:
        assert daemon.stop() == 0, daemon.log()
    by_name = {r["name"]: r for r in rows}
    assert by_name["healthy"]["status"] == "success"
    for name in ("crashes", "floods", "raises", "missing"):
        assert by_name[name]["status"] == "failed", by_name[name]
    assert by_name["crashes"]["error"] == JOBS["crashes"][2]
    assert by_name["floods"]["error"] == JOBS["floods"][2]
    assert by_name["floods"]["tail"] <= 65536
    assert "ModuleNotFoundError" in by_name["missing"]["error"]
    job_env = by_name["environment"]["output_tail"]
    (stored,) = query(
        database_url,
        "SELECT o.idempotency_key AS key, r.uuid FROM occurrence o"
        " JOIN run r ON r.occurrence_id = o.id JOIN task t ON t.id = o.task_id"
        " WHERE t.name = 'environment'",
    )
    uuid.UUID(stored["key"])  # a manual firing's key is a random UUID, stored at its creation
    assert f"SCHEDULER_IDEMPOTENCY_KEY={stored['key']}" in job_env
    assert f"SCHEDULER_RUN_UUID={stored['uuid']}" in job_env
    assert "SCHEDULER_LEASE_TOKEN=1" in job_env
    assert "SCHEDULER_DATABASE_URL" not in job_env  # jobs do not get the daemon's database role


def test_the_daemon_refuses_a_schema_that_lacks_its_steps_and_asks_for_migrate(
    spawn, empty_database_url, tmp_path
) -> None:
    daemon = spawn(empty_database_url, "unmigrated")
    assert daemon.proc.wait(30) == 4  # EXIT_SCHEMA_BEHIND
    lines = [line for line in daemon.log().splitlines() if line.startswith("error:")]
    build = migration.build()
    assert lines == [
        f"error: the database schema is at nothing, this build (schema {build.head}) needs "
        f"{build.needs}; run `scheduler-daemon migrate`"
    ]


def test_contradictory_timing_settings_are_refused_with_one_line(cli) -> None:
    result = cli("run", "--drain-timeout", "60s", "--stop-timeout", "30s")
    assert result.code == 2
    assert result.err.startswith("error: --drain-timeout 60s plus 5s to record outcomes exceeds")
    assert result.err.count("\n") == 1


def test_a_trigger_wakes_an_idle_daemon_through_listen_notify(
    spawn, cli, database_url, tmp_path
) -> None:
    cli("tasks", "add", "t", "--every", "1h", "--command", "true")
    daemon = spawn(
        database_url,
        "idle",
        "--poll-interval",
        "60s",
        "--reconcile-interval",
        "60s",
        env={"SCHEDULER_LOG_LEVEL": "debug"},
    )
    try:
        daemon.instance_id()
        # Listening, and past its first pass: from here it sleeps for a minute unless notified.
        wait_for(
            lambda: query(
                database_url,
                "SELECT 1 FROM pg_stat_activity WHERE query = %(listen)s",
                {"listen": 'LISTEN "scheduler_daemon_wakeup"'},
            ),
            message="the daemon to LISTEN",
        )
        wait_for(lambda: '"reconcile_pass"' in daemon.log(), message="the first pass")
        cli("tasks", "trigger", "t")
        triggered = time.monotonic()
        wait_for(
            lambda: query(database_url, "SELECT 1 FROM run"),
            timeout=10,
            message="the notified daemon to start the run",
        )
        latency = time.monotonic() - triggered
        print(f"trigger to run start: {latency:.3f}s with a 60s poll interval")
        assert latency < 5
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_status_shows_instances_queue_and_budget(spawn, cli, database_url, tmp_path) -> None:
    daemon = spawn(database_url, "shown", "--concurrency", "3")
    try:
        instance_id = daemon.instance_id()
        status = cli("status", "--json").json()
    finally:
        daemon.stop()
    (instance,) = status["instances"]
    assert instance["id"] == instance_id
    assert instance_id.startswith("shown-")
    assert instance["concurrency"] == 3
    assert instance["takeover_bound_seconds"] == 3 + 1 + 1  # FAST: ttl + grace + reconcile
    assert abs(instance["clock_drift_seconds"]) < 1
    assert (status["queue_depth"], status["executing_runs"], status["max_concurrent_runs"]) == (
        0,
        0,
        16,
    )
