"""The soak's verdict on arguments (tests/chaos/soak_args.py) on planted records, its shell job on
a real `sh`, and its seeded argument sets through the CLI's own parser: a green soak must mean
every attempt really saw its occurrence's arguments."""

import os
import random
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scheduler_daemon.domain import argument
from scheduler_daemon.executors.base import JobContext
from tests.chaos.soak_args import Triggers, Verdict, seen
from tests.chaos.soak_workload import ARGS_JOB

TASKS = {"args-shell": "shell", "args-python": "python", "args-inproc": "inproc"}


def _occ(occ: int, args: Any, *, task: str = "args-shell", trigger: str = "manual") -> dict:
    return {"id": occ, "task": task, "trigger": trigger, "args": args}


def _seen(run: int, occ: int, attempt: int, args: Any, *, task: str = "args-shell") -> dict:
    return {"task": task, "occ": occ, "run": run, "attempt": attempt, "args": args}


def _triggers(sent: dict[int, Any], uncertain: dict[str, Any] | None = None) -> Triggers:
    triggers = Triggers(TASKS, random.Random(0))
    triggers.sent.update(sent)
    triggers.uncertain.update(uncertain or {})
    return triggers


def test_a_retry_that_saw_other_arguments_or_none_is_a_problem() -> None:
    args = {"nonce": "n1", "who": "x"}
    verdict = Verdict(
        [_occ(10, args), _occ(11, args | {"nonce": "n2"})],
        [
            _seen(1, 10, 1, args),
            _seen(2, 10, 2, None),  # the retry lost them
            _seen(3, 11, 1, args | {"nonce": "n2"}),
            _seen(4, 11, 2, args),  # the retry got another occurrence's
        ],
        _triggers({10: args, 11: args | {"nonce": "n2"}}),
    )
    assert len(verdict.problems) == 2, verdict.problems
    assert "run 2 (attempt 2) saw None" in verdict.problems[0]
    assert "run 4 (attempt 2) saw" in verdict.problems[1]
    assert verdict.window() == 0  # no retry saw its own arguments


def test_arguments_on_an_occurrence_triggered_without_or_scheduled_are_problems() -> None:
    verdict = Verdict(
        [
            _occ(10, {"nonce": "n1"}),  # triggered without arguments
            _occ(11, {"stray": 1}, trigger="schedule"),
            _occ(12, None, trigger="schedule"),
        ],
        [_seen(1, 12, 1, {"stray": 1})],  # a scheduled firing's job saw some
        _triggers({10: None}),
    )
    assert any("occurrence 10 (manual) records" in p and "sent None" in p for p in verdict.problems)
    assert any("occurrence 11 (schedule)" in p and "nobody sent" in p for p in verdict.problems)
    assert any("run 1 (attempt 1) saw {'stray': 1}" in p for p in verdict.problems)
    assert len(verdict.problems) == 3


def test_arguments_recorded_other_than_sent_are_a_problem_and_retries_fill_the_window() -> None:
    sent = {"nonce": "n1", "n": 3}
    occurrences = [
        _occ(10, {"nonce": "n1", "n": "3"}),  # recorded, but not as sent
        *(_occ(20 + i, {"nonce": f"m{i}"}, task=task) for i, task in enumerate(TASKS)),
    ]
    records = [
        r
        for i, task in enumerate(TASKS)
        for r in (
            _seen(100 + i, 20 + i, 1, {"nonce": f"m{i}"}, task=task),
            _seen(200 + i, 20 + i, 2, {"nonce": f"m{i}"}, task=task),
        )
    ]
    verdict = Verdict(
        occurrences,
        records,
        _triggers({10: sent, **{20 + i: {"nonce": f"m{i}"} for i in range(3)}}),
    )
    assert len(verdict.problems) == 1
    assert "occurrence 10" in verdict.problems[0]
    assert dict(verdict.retried()) == {"shell": 1, "python": 1, "inproc": 1}
    assert verdict.window() == 1


def test_a_failed_calls_arguments_are_accepted_once() -> None:
    args = {"nonce": "n7", "x": "y"}
    verdict = Verdict([_occ(10, args), _occ(11, args)], [], _triggers({}, uncertain={"n7": args}))
    assert len(verdict.problems) == 1
    assert "occurrence 11" in verdict.problems[0]


def test_the_shell_job_records_what_it_saw_and_fails_only_the_first_attempt(
    tmp_path: Path,
) -> None:
    job = tmp_path / "args-job"
    job.write_text(ARGS_JOB)
    job.chmod(0o755)
    folder = tmp_path / "args"
    folder.mkdir()
    given = {"q": 'quote " \\ and\nnewline', "u": "é 雪 🙂", "n": [1, {"d": None}]}
    codes = []
    for run, (attempt, args) in enumerate([(1, given), (2, given), (1, None)], start=1):
        ctx = JobContext(  # its environment() is what the shell executor hands the job
            task_id=1,
            task_name="args-shell",
            occurrence_id=7,
            run_id=run,
            scheduled_for=datetime(2030, 1, 1, tzinfo=UTC),
            attempt=attempt,
            lease_token=run,
            idempotency_key="key-7",
            timeout=None,
            deadline=0.0,
            run_uuid=f"uuid-{run}",
            args=args,
        )
        env = {"PATH": os.environ["PATH"], **ctx.environment()}
        codes.append(subprocess.run([str(job), str(folder)], env=env, check=False).returncode)
    records, unreadable = seen(folder)
    assert unreadable == []
    assert codes == [1, 0, 1]
    assert [(r["run"], r["attempt"], r["args"]) for r in records] == [
        (1, 1, given),
        (2, 2, given),
        (3, 1, None),
    ]
    assert sorted(os.listdir(folder)) == ["uuid-1", "uuid-2", "uuid-3"]  # nothing left aside


def test_each_seeded_argument_set_is_what_the_cli_parses_from_its_options() -> None:
    triggers = Triggers(TASKS, random.Random(1))
    for _ in range(200):
        args, options = triggers.arguments()
        if options[0] == "--args-json":
            parsed = argument.trigger_args((), options[1])
        else:
            parsed = argument.trigger_args(options[1::2], None)
        assert parsed == args
