"""The `in_process` task field as pure code (issue 33): its rule on TaskSpec, what an update of
the executor does to it, and its key in task files.
On 3b194d0 every test here fails: TaskSpec has no `in_process`, task files no `in-process`."""

from datetime import timedelta

import pytest

from scheduler_daemon.domain import task_file
from scheduler_daemon.domain.task import InvalidTask, TaskSpec


def _python(**kw: object) -> TaskSpec:
    return TaskSpec(
        name="hello", executor="python", target="mymodule:hello", every=timedelta(seconds=10), **kw
    )


def test_an_in_process_python_task_is_valid_and_the_default_is_a_worker_process() -> None:
    _python(in_process=True).validate()
    assert _python().in_process is False


@pytest.mark.parametrize(("executor", "target"), [("shell", "true"), ("http", "https://x/")])
def test_in_process_is_refused_for_any_executor_but_python_in_one_line(
    executor: str, target: str
) -> None:
    spec = TaskSpec(
        name="t", executor=executor, target=target, every=timedelta(hours=1), in_process=True
    )
    with pytest.raises(InvalidTask, match=r"^--in-process is for --call \(python\) tasks only$"):
        spec.validate()


def test_moving_a_task_away_from_python_drops_in_process_and_keeping_python_keeps_it() -> None:
    spec = _python(in_process=True)
    assert spec.with_changes(executor="shell", target="true").in_process is False
    assert spec.with_changes(executor="python", target="m:other").in_process is True
    assert spec.with_changes(timeout=timedelta(seconds=5)).in_process is True
    # Given with the move, it is judged, not dropped.
    moved = spec.with_changes(executor="shell", target="true", in_process=True)
    with pytest.raises(InvalidTask, match="--in-process"):
        moved.validate()


def test_a_task_file_reads_and_writes_in_process_and_refuses_a_non_boolean() -> None:
    text = '[hello]\ncall = "mymodule:hello"\nevery = "10s"\nin-process = true\n'
    (spec,) = task_file.parse(text, {}).values()
    assert spec.in_process is True
    rendered = task_file.render([spec])
    assert "in-process = true" in rendered
    assert task_file.parse(rendered, {}) == {"hello": spec}
    assert "in-process" not in task_file.render([spec.with_changes(in_process=False)])
    with pytest.raises(InvalidTask, match="field 'in-process': must be true or false"):
        task_file.parse(text.replace("= true", '= "yes"'), {})
    with pytest.raises(InvalidTask, match="--in-process is for --call"):
        task_file.parse('[s]\ncommand = "true"\nevery = "1h"\nin_process = true\n', {})
