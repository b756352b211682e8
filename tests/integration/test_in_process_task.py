"""A task marked in-process (issue 33) against a real database: stored, shown, updated, applied
and exported; claimed with `in_process` by sd_claim_launch_v3 and handed to the executor under
"inprocess"; refused (one line, exit 2, nothing written) while an instance of a build before
0020 is registered, also when that instance registers while the task is being written.
On 3b194d0 every test here fails: there is no `--in-process`, no column and no v3."""

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler_daemon.domain import control
from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.executors.base import Executor, Job, JobContext
from scheduler_daemon.storage import migration
from scheduler_daemon.storage.error import Conflict
from tests.support import OLD_INSTANCE, Replica, query, write_during_registration

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
        "SELECT task_name, in_process FROM sd_claim_launch_v3(1, 10, 'o', '5s', '1s', 'x', NULL)",
    )
    assert sorted((r["task_name"], r["in_process"]) for r in rows) == [
        ("inproc", True),
        ("older", False),
        ("worker", False),
    ]


@pytest.mark.parametrize("claim", ["sd_claim_launch_v1", "sd_claim_launch_v2"])
def test_the_claims_of_older_builds_pass_over_an_in_process_task(
    client, database_url, claim: str
) -> None:
    """An older build registered after an in-process task exists claims through v1 (before 0019)
    or v2 (0019): it takes every other firing and leaves the in-process one queued for a build
    that runs it in-process (migration 0022). Before 0022 both claimed it, and the test fails."""
    for name, in_process in (("inproc", True), ("worker", False), ("older", False)):
        task = client.add_task(_spec(name, in_process=in_process))
        client.trigger(task.id, requested_by="test")
    query(database_url, "UPDATE task SET in_process = NULL WHERE name = 'older'")
    rows = query(database_url, f"SELECT task_name FROM {claim}(1, 10, 'o', '5s', '1s', 'x', NULL)")
    assert sorted(r["task_name"] for r in rows) == ["older", "worker"]
    left = "SELECT t.name, o.status FROM occurrence o JOIN task t ON t.id = o.task_id"
    assert query(database_url, left + " WHERE t.in_process") == [
        {"name": "inproc", "status": "queued"}
    ]
    rows = query(
        database_url, "SELECT task_name FROM sd_claim_launch_v3(1, 10, 'o', '5s', '1s', 'x', NULL)"
    )
    assert [r["task_name"] for r in rows] == ["inproc"]


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


# -- the refusal while an older build is registered ----------------------------------------------
@pytest.fixture
def old_instance(db) -> str:
    db.execute(OLD_INSTANCE, ("old-a", "0019"))
    return "old-a"


REFUSED = (
    "error: task 'hello' cannot run in-process while instance(s) old-a (host old-host, version "
    f"0.9.0, schema 0019) of builds before schema {control.IN_PROCESS_SINCE} are registered (they "
    "would run it in a "
    "worker process); roll them to this build, or wait until a stopped one's row expires\n"
)


def test_adding_an_in_process_task_is_refused_while_an_older_build_is_registered(
    cli, counts, old_instance
) -> None:
    before = counts()
    result = cli(*ADD)
    assert (result.code, result.err, result.out) == (2, REFUSED, "")
    assert counts() == before
    # What is not in-process is not refused.
    assert cli("tasks", "add", "plain", "--every", "1h", "--call", "m:f").code == 0


@pytest.mark.usefixtures("old_instance")
def test_update_apply_and_the_client_are_refused_alike_and_write_nothing(
    cli, client, counts, db, tmp_path: Path
) -> None:
    assert cli("tasks", "add", "hello", "--every", "1h", "--call", "m:f").code == 0
    rows = db.execute("SELECT * FROM task").fetchall()
    before = counts()
    updated = cli("tasks", "update", "hello", "--in-process")
    assert (updated.code, updated.err) == (2, REFUSED)
    path = tmp_path / "tasks.toml"
    path.write_text('[hello]\ncall = "m:f"\nevery = "1h"\nin-process = true\n')
    applied = cli("tasks", "apply", "-f", str(path), "--source", "s", "--adopt")
    assert (applied.code, applied.err) == (2, "error: task 'hello': " + REFUSED[len("error: ") :])
    with pytest.raises(Conflict, match="old-a"):
        client.add_tasks([_spec("other"), _spec("third", in_process=True)])
    with pytest.raises(Conflict, match="old-a"):
        client.update_task("hello", in_process=True)
    assert counts() == before
    assert db.execute("SELECT * FROM task").fetchall() == rows


def test_an_instance_of_this_build_does_not_refuse(cli, db) -> None:
    db.execute(OLD_INSTANCE, ("new-a", migration.head_revision()))
    assert cli(*ADD).code == 0


def test_status_names_the_instances_that_refuse_in_process_tasks(cli, db, old_instance) -> None:
    db.execute(OLD_INSTANCE, ("new-a", migration.head_revision()))
    fields = cli("status", "--json").json()
    assert fields["in_process_refused_by"] == [
        {"id": "old-a", "hostname": "old-host", "version": "0.9.0", "schema_revision": "0019"}
    ]
    assert (
        "in-process tasks refused while these older builds are registered: old-a (host "
        "old-host, version 0.9.0, schema 0019)" in cli("status").out
    )


def test_status_names_none_when_every_instance_is_of_this_build(cli, db) -> None:
    db.execute(OLD_INSTANCE, ("new-a", migration.head_revision()))
    assert cli("status", "--json").json()["in_process_refused_by"] == []
    assert "in-process" not in cli("status").out


def test_an_older_build_registering_while_the_task_is_written_is_seen_and_refuses_it(
    client, database_url, counts
) -> None:
    # A registration in progress holds the schema compatibility lock shared and has inserted
    # its (uncommitted) row. The add must wait for it and then see the row. A check that read
    # the instances without that lock (or before the wait) would see no row, add the task and
    # commit it beside a build that runs it in a worker process.
    before = counts()
    error = write_during_registration(
        database_url, lambda: client.add_task(_spec(in_process=True)), "old-late", "0019"
    )
    assert isinstance(error, Conflict), error
    assert "old-late (host old-host, version 0.9.0, schema 0019)" in str(error)
    assert counts() == {**before, "instance": before["instance"] + 1}
