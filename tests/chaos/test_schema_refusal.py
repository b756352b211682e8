"""Real daemons facing a schema they cannot work with (ADR 0002): at start, and after waking from
a freeze to find a contract ran meanwhile. Each refusal is one line and its own exit code."""

import json
import signal

import pytest

from scheduler_daemon.storage import migration
from tests.support import query, wait_for

pytestmark = pytest.mark.slow


def _contracted_by_a_newer_build(url: str) -> None:
    query(url, f"UPDATE {migration.VERSION_TABLE} SET version_num = '9999'")
    record = {"revision": "9999", "oldest_build": "9999", "contract_pending": []}
    query(
        url,
        "UPDATE fleet_setting SET value = %s::jsonb WHERE key = 'schema_compat'",
        (json.dumps(record),),
    )


def test_the_daemon_refuses_a_schema_past_its_build_with_exit_5(spawn, database_url) -> None:
    _contracted_by_a_newer_build(database_url)
    daemon = spawn(database_url, "tooold")
    assert daemon.proc.wait(30) == 5
    lines = [line for line in daemon.log().splitlines() if line.startswith("error:")]
    assert lines == [
        "error: the database schema is at 9999 and works with builds from schema 9999 on; "
        f"this build is at schema {migration.head_revision()}: upgrade it"
    ]
    assert query(database_url, "SELECT id FROM instance") == []


def test_a_frozen_daemon_waking_to_a_contracted_schema_exits_5_without_writing(
    spawn, cli, database_url
) -> None:
    cli("tasks", "add", "t", "--every", "1h", "--command", "sleep 60")
    daemon = spawn(database_url, "frozen", "--instance-expiry", "5s")
    instance_id = daemon.instance_id()
    cli("tasks", "trigger", "t")
    wait_for(
        lambda: query(database_url, "SELECT 1 FROM run WHERE status = 'running'"),
        message="the job to start",
    )
    daemon.signal(signal.SIGSTOP)
    # Meanwhile its row expires and a newer build contracts the schema.
    query(database_url, "DELETE FROM instance WHERE id = %s", (instance_id,))
    _contracted_by_a_newer_build(database_url)
    before = query(database_url, "SELECT * FROM run ORDER BY id")
    daemon.signal(signal.SIGCONT)
    assert daemon.proc.wait(30) == 5, daemon.log()
    assert '"schema_incompatible"' in daemon.log()
    assert query(database_url, "SELECT id FROM instance") == []  # it did not register again
    assert query(database_url, "SELECT * FROM run ORDER BY id") == before  # nor write its run
