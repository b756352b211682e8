"""A real daemon whose passes keep failing gives up with exit code 3, after draining; a database
outage, however long, never makes it give up."""

from pathlib import Path

import pytest

from scheduler_daemon.runtime.supervision import EXIT_FAILED_PASSES
from scheduler_daemon.storage import migration
from tests.support import query, wait_for

pytestmark = pytest.mark.slow


def test_a_loop_that_keeps_failing_drains_and_exits_3_but_an_outage_does_not_count(
    spawn, owned_server, cli, tmp_path: Path
) -> None:
    owned_server.start()
    url = owned_server.url
    migration.upgrade(url)
    never = tmp_path / "never"
    hold = f"while [ ! -e {never} ]; do sleep 0.05; done"
    cli("tasks", "add", "held", "--every", "1h", "--command", hold, url=url)
    daemon = spawn(url, "failing", "--max-failed-passes", "2")
    instance_id = daemon.instance_id()

    owned_server.stop()  # an outage: more failed passes than the limit, and it stays
    wait_for(
        lambda: daemon.log().count('"pass_failed"') >= 3,
        message="passes to fail while the database is down",
    )
    assert daemon.proc.poll() is None
    owned_server.start()
    cli("tasks", "trigger", "held", url=url)
    wait_for(lambda: query(url, "SELECT 1 FROM run WHERE status = 'running'"), message="the job")

    # A broken SQL object: admission's budget query now fails on every pass.
    query(url, "ALTER TABLE fleet_setting RENAME TO fleet_setting_gone")
    assert daemon.proc.wait(60) == EXIT_FAILED_PASSES, daemon.log()

    log = daemon.log()
    assert log.count('"pass_crashed"') >= 2
    (giving_up,) = [line for line in log.splitlines() if '"loop_failing"' in line]
    assert 'relation \\"fleet_setting\\" does not exist' in giving_up
    assert '"exit_code": 3' in giving_up
    # It drained like a SIGTERM: the held job was stopped and recorded, the instance removed.
    assert query(url, "SELECT status FROM run") == [{"status": "interrupted"}]
    assert query(url, "SELECT 1 FROM instance WHERE id = %s", (instance_id,)) == []
