"""The completer against a real database: outcomes recorded on run, occurrence and task,
retries after the backoff, and every write fenced on owner and token (each race forced)."""

from datetime import timedelta
from typing import Any

from tests.support import (
    Replica,
    finished_in_sequence,
    launched_shell_run,
    launched_shell_runs,
    query,
    snapshot,
)


def _failing(client: Any, pool: Any, executors: Any, url: str, **retries: Any) -> Replica:
    """The replica holding one launched run of `exit 3` (launched_shell_run) with `retries`."""
    return launched_shell_run(client, pool, executors, url, command="exit 3", **retries).replica


def test_a_completion_whose_token_was_raised_is_fenced_and_changes_no_row(
    client, pool, executors, database_url
) -> None:
    # Would fail against a completion that matched the run by id alone (river#1302).
    replica = launched_shell_run(client, pool, executors, database_url).replica
    # The race window: between launch and completion a takeover/cancel raises the token.
    query(database_url, "UPDATE occurrence SET lease_token = lease_token + 1 RETURNING id")
    (run,) = replica.finished()
    before = snapshot(database_url)
    assert replica.completer.complete(run) == "fenced"
    assert snapshot(database_url) == before


def test_a_completion_with_its_token_intact_is_recorded_on_run_occurrence_and_task(
    client, pool, executors, database_url
) -> None:
    launched = launched_shell_run(
        client, pool, executors, database_url, command="echo hello; exit 0"
    )
    replica = launched.replica
    (run,) = replica.finished()
    assert replica.completer.complete(run) == "recorded"
    (row,) = query(database_url, "SELECT * FROM run")
    assert (row["status"], row["exit_code"], row["output_tail"]) == ("success", 0, "hello\n")
    (occ,) = query(database_url, "SELECT status, attempts FROM occurrence")
    assert occ == {"status": "success", "attempts": 1}
    t = client.get_task(launched.task.id)  # read from its occurrences (issue 45)
    assert (t.last_status, t.last_outcome_seq) == ("success", 1)
    assert (
        replica.completer.complete(run) == "fenced"
    )  # re-sending the same outcome changes nothing


def test_a_late_completion_of_an_older_occurrence_leaves_the_newer_result(
    client, pool, executors, database_url
) -> None:
    # Forced order: seq 2 completes first, then seq 1 arrives late. Without the
    # last_outcome_seq guard the task row would show occurrence 1.
    task, replica = launched_shell_runs(client, pool, executors, database_url, 2, command="exit 0")
    older, newer = finished_in_sequence(replica, database_url)
    assert replica.completer.complete(newer) == "recorded"
    assert replica.completer.complete(older) == "recorded"
    (row,) = query(
        database_url, "SELECT occurrence_seq FROM occurrence WHERE id = %s", (newer.occurrence_id,)
    )
    assert row["occurrence_seq"] == 2
    assert client.get_task(task.id).last_outcome_seq == 2  # read from its occurrences


def test_a_failed_attempt_with_attempts_left_goes_back_to_the_queue_after_the_backoff(
    client, pool, executors, database_url
) -> None:
    replica = _failing(
        client, pool, executors, database_url, max_attempts=2, backoff=timedelta(minutes=5)
    )
    (run,) = replica.finished()
    assert replica.completer.complete(run) == "retry"
    (occ,) = query(
        database_url,
        "SELECT status, attempts, not_before - updated_at AS wait, error FROM occurrence",
    )
    assert occ["status"] == "queued"
    assert occ["attempts"] == 1
    assert timedelta(minutes=4, seconds=59) < occ["wait"] <= timedelta(minutes=5)
    assert occ["error"] == "exit code 3"
    assert replica.launcher.run_once().claimed == 0  # not before the backoff
    query(database_url, "UPDATE occurrence SET not_before = now() RETURNING id")
    replica.launcher.run_once()
    (run,) = replica.finished()
    assert replica.completer.complete(run) == "recorded"
    (t,) = client.list_tasks()
    assert (t.last_status, t.status) == ("failed", "enabled")


def test_with_a_backoff_max_each_retry_draws_its_delay_and_records_it(
    client, pool, executors, database_url, cli
) -> None:
    # Issue 37 item 2: retry n waits uniform(0, min(max, backoff x 2^(n-1))): 1 s, 2 s, 4 s, 4 s.
    backoff = {"backoff": timedelta(seconds=1), "backoff_max": timedelta(seconds=4)}
    replica = _failing(client, pool, executors, database_url, max_attempts=5, **backoff)
    for retry, ceiling in enumerate((1, 2, 4, 4), start=1):
        (run,) = replica.finished()
        assert replica.completer.complete(run) == "retry"
        (occ,) = query(
            database_url,
            "SELECT attempts, retry_delay, not_before - updated_at AS wait FROM occurrence",
        )
        assert occ["attempts"] == retry
        assert timedelta(0) <= occ["retry_delay"] <= timedelta(seconds=ceiling), retry
        assert abs(occ["wait"] - occ["retry_delay"]) < timedelta(milliseconds=5)  # what it waits
        shown = cli("runs", "show", str(run.run_id), "--json").json()
        assert shown["occurrence_retry_delay_seconds"] == occ["retry_delay"].total_seconds()
        query(database_url, "UPDATE occurrence SET not_before = now() RETURNING id")
        assert replica.launcher.run_once().launched == 1
    (run,) = replica.finished()
    assert replica.completer.complete(run) == "recorded"  # the fifth attempt was the last
