"""The Python API (`scheduler_daemon.Client`) against a real database, beside the CLI."""

import pytest

pytestmark = pytest.mark.smoke


def test_the_python_api_mirrors_the_task_commands(database_url, cli) -> None:
    from datetime import timedelta

    from scheduler_daemon import Client, TaskSpec

    client = Client(database_url)
    spec = TaskSpec("api", "python", "tests.jobs:ok", every=timedelta(minutes=5), overlap="allow")
    task = client.add_task(spec)
    assert cli("tasks", "show", "api", "--json").json()["target"] == "tests.jobs:ok"
    assert client.update_task("api", concurrency_key="k").spec.concurrency_key == "k"
    assert client.pause("api").spec.paused is True
    assert client.resume("api").spec.paused is False
    assert len(client.next_fire_times(task.id, 3)) == 3
    occurrence = client.trigger("api", requested_by="test")
    assert occurrence.status == "queued"
    assert [r.occurrence_id for r in client.list_runs(task="api")] == [occurrence.id]
    ended = client.delete("api", force=True, requested_by="test")
    assert [(o.id, o.status) for o in ended] == [(occurrence.id, "cancelled")]
