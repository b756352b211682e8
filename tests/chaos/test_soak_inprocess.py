"""The soak's in-process verdict (tests/chaos/soak_inprocess.py) on planted job logs: it must
report what it exists to catch, so a green soak means the jobs really kept apart."""

import json
from pathlib import Path
from typing import Any

from tests.chaos.soak_inprocess import Verdict


def _start(run: int, occ: int, pid: int, *, token: int = 1, key: str = "", **more: Any) -> dict:
    return {
        "e": "start",
        "kind": "sync",
        "task": "ip-sync-0",
        "run": run,
        "occ": occ,
        "attempt": 1,
        "token": token,
        "key": key or f"key-{occ}",
        "pid": pid,
        "taken": more.get("taken", []),
        "src": "soak_jobs.py",
    }


def _verdict(tmp_path: Path, *lines: dict) -> Verdict:
    log = tmp_path / "joblog"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return Verdict(log)


def test_a_lock_found_taken_by_a_running_job_is_an_overlap(tmp_path: Path) -> None:
    held = [{"lock": "task-ip-sync-0", "holder": ["1", "100"]}]
    verdict = _verdict(tmp_path, _start(1, 10, 100), _start(2, 11, 200, taken=held))
    assert len(verdict.overlaps) == 1
    assert "run 2" in verdict.overlaps[0]


def test_a_lock_held_by_a_frozen_daemons_job_is_counted_apart_with_its_work_after_the_thaw(
    tmp_path: Path,
) -> None:
    held = [{"lock": "occ-x", "holder": ["1", "100"]}]
    verdict = _verdict(
        tmp_path,
        _start(1, 10, 100),
        {"e": "mark", "what": "frozen", "pid": 100},
        _start(2, 10, 200, token=2, key="key-10", taken=held),
        {"e": "mark", "what": "thawed", "pid": 100},
        {"e": "end", "run": 1, "pid": 100, "how": "returned"},
    )
    assert verdict.overlaps == []
    assert verdict.beside_frozen == {(1, 2)}
    assert verdict.residue() == [(1, 2)]
    assert verdict.problems == []


def test_a_lock_found_just_after_its_holders_thaw_is_counted_apart(tmp_path: Path) -> None:
    """The `thawed` mark is written before the SIGCONT, and the thawed job needs a moment to
    return (or its daemon to exit 9): a job of the key that starts in that moment finds the lock
    still held by a pid no longer marked frozen. Its holder was frozen through its takeover, so
    this is the little work after a thaw, not an overlap (a soak failed on it: seed 7960)."""
    held = [{"lock": "key-ip0", "holder": ["1", "100"]}]
    verdict = _verdict(
        tmp_path,
        _start(1, 10, 100),
        {"e": "mark", "what": "frozen", "pid": 100},
        {"e": "mark", "what": "thawed", "pid": 100},
        _start(2, 11, 200, taken=held),
        {"e": "end", "run": 1, "pid": 100, "how": "returned"},
    )
    assert verdict.overlaps == []
    assert verdict.beside_frozen == {(1, 2)}
    assert verdict.residue() == [(1, 2)]


def test_a_freeze_before_the_holder_began_excuses_nothing(tmp_path: Path) -> None:
    held = [{"lock": "key-ip0", "holder": ["1", "100"]}]
    verdict = _verdict(
        tmp_path,
        {"e": "mark", "what": "frozen", "pid": 100},
        {"e": "mark", "what": "thawed", "pid": 100},
        _start(1, 10, 100),
        _start(2, 11, 200, taken=held),
    )
    assert len(verdict.overlaps) == 1
    assert verdict.beside_frozen == set()


def test_a_key_of_two_occurrences_and_a_token_that_does_not_rise_are_problems(
    tmp_path: Path,
) -> None:
    verdict = _verdict(
        tmp_path,
        _start(1, 10, 100, token=3, key="same"),
        _start(2, 11, 100, key="same"),
        _start(3, 10, 200, token=3, key="same"),
    )
    assert any("given to occurrences [10, 11]" in p for p in verdict.problems)
    assert any("occurrence 10 attempts' tokens" in p for p in verdict.problems)
