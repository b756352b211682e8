"""A task marked in-process (issue 33) against a real database: stored, shown, updated, applied
and exported; claimed with `in_process` by sd_claim_launch_v6 and handed to the executor under
"inprocess".
On 3b194d0 every test here fails: there is no `--in-process`, no column and no v3."""

from datetime import timedelta
from pathlib import Path
from typing import Any

from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.executors.base import Executor, Job, JobContext
from tests.support import Replica, query

ADD = ("tasks", "add", "hello", "--every", "10s", "--call", "tests.jobs:ok", "--in-process")


def _spec(name: str = "hello", **kw: Any) -> TaskSpec:
    return TaskSpec(
        name=name, executor="python", target="tests.jobs:ok", every=timedelta(hours=1), **kw
    )


# -- the field -----------------------------------------------------------------------------------
def test_an_in_process_task_is_stored_and_shown_by_show_and_list(cli, db) -> None:
    added = cli(*ADD, "--json")
    assert added.code == 0, added.err
    assert added.json()["in_process"] is True
    assert cli("tasks", "add", "plain", "--every", "1h", "--call", "m:f").code == 0
    assert db.execute("SELECT name, in_process FROM task ORDER BY id").fetchall() == [
        {"name": "hello", "in_process": True},
        {"name": "plain", "in_process": False},
    ]
    listed = cli("tasks", "list", "--json").json()
    assert [(t["name"], t["in_process"]) for t in listed] == [("hello", True), ("plain", False)]
    assert "in_process" in cli("tasks", "show", "hello").out


def test_in_process_without_call_is_one_line_exit_2_and_writes_nothing(cli, counts) -> None:
    before = counts()
    result = cli("tasks", "add", "s", "--every", "1h", "--command", "true", "--in-process")
    assert (result.code, result.err) == (
        2,
        "error: --in-process is for --call (python) tasks only\n",
    )
    assert counts() == before


def test_update_turns_in_process_on_and_off_and_a_move_to_command_drops_it(cli, client) -> None:
    assert cli("tasks", "add", "t", "--every", "1h", "--call", "m:f").code == 0
    assert cli("tasks", "update", "t", "--in-process").code == 0
    assert client.get_task("t").spec.in_process is True
    assert cli("tasks", "update", "t", "--no-in-process").code == 0
    assert client.get_task("t").spec.in_process is False
    assert cli("tasks", "update", "t", "--in-process").code == 0
    assert cli("tasks", "update", "t", "--command", "true").code == 0
    assert client.get_task("t").spec.in_process is False
    refused = cli("tasks", "update", "t", "--in-process")
    assert (refused.code, refused.err) == (
        2,
        "error: --in-process is for --call (python) tasks only\n",
    )


def test_apply_and_export_carry_in_process_and_export_apply_changes_nothing(
    cli, tmp_path: Path, database_url
) -> None:
    path = tmp_path / "tasks.toml"
    path.write_text('[hello]\ncall = "tests.jobs:ok"\nevery = "10s"\nin-process = true\n')
    applied = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert applied.code == 0, applied.err
    exported = cli("tasks", "export")
    assert "in-process = true" in exported.out
    before = query(database_url, "SELECT * FROM task ORDER BY id")
    path.write_text(exported.out)
    again = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert again.out.splitlines() == ["1 task(s) in the file, 0 change(s)"]
    assert query(database_url, "SELECT * FROM task ORDER BY id") == before
    path.write_text(exported.out.replace("in-process = true\n", ""))
    changed = cli("tasks", "apply", "-f", str(path), "--source", "s")
    assert changed.out.splitlines()[0] == "~ changed hello: in_process"


# -- the claim and the launcher ------------------------------------------------------------------
def test_the_claim_returns_in_process_and_false_for_what_an_older_build_stored(
    client, database_url
) -> None:
    for name, in_process in (("inproc", True), ("worker", False), ("older", False)):
        task = client.add_task(_spec(name, in_process=in_process))
        client.trigger(task.id, requested_by="test")
    query(database_url, "UPDATE task SET in_process = NULL WHERE name = 'older'")
    rows = query(
        database_url,
        "SELECT task_name, in_process "
        "FROM sd_claim_launch_v6(1, 10, 'o', '5s', '1s', 'x', '{}', NULL)",
    )
    assert sorted((r["task_name"], r["in_process"]) for r in rows) == [
        ("inproc", True),
        ("older", False),
        ("worker", False),
    ]


class KeyRecorder:
    """A real executor of the codebase registered under `key`, noting the tasks it started."""

    def __init__(self, inner: Executor, key: str, started: list[tuple[str, str]]) -> None:
        self.inner, self.key, self.started = inner, key, started

    def start(self, ctx: JobContext, payload: Any) -> Job:
        self.started.append((ctx.task_name, self.key))
        return self.inner.start(ctx, payload)

    def close(self) -> None:
        """The fixture closes the inner executor."""


def test_the_launcher_hands_an_in_process_task_to_the_inprocess_executor(
    client, pool, executors, database_url
) -> None:
    # On the old launcher (executors[claim.executor]) both tasks go to "python".
    started: list[tuple[str, str]] = []
    keyed = {
        **executors,
        "python": KeyRecorder(executors["python"], "python", started),
        "inprocess": KeyRecorder(executors["python"], "inprocess", started),
    }
    for name, in_process in (("inproc", True), ("worker", False)):
        task = client.add_task(_spec(name, in_process=in_process))
        client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, keyed, "a")
    assert replica.launcher.run_once().launched == 2
    assert sorted(started) == [("inproc", "inprocess"), ("worker", "python")]
    assert all(run.outcome.status == "success" for run in replica.finished())
