"""A claimed row the launcher cannot start is that run's outcome, not the pass's: its run is
recorded `failed` with the error, fenced on owner and token, through the completer's normal
path (in a transaction after the claim's, not left to a takeover), and the other rows of the
batch launch (issue 44, KNOWN-FAILURES 39-40).

On 61278d7 the claim's jsonb was decoded while psycopg fetched the rows: arguments 1,000 deep
raised RecursionError inside the pass after the claim had committed every row of the batch
`running`, and `executor.start()` raising (an http URL `urlsplit` refuses) did the same; no job
of the batch started, and the daemon exited 3 after --max-failed-passes."""

from datetime import timedelta
from typing import Any

import structlog

from tests.support import Replica, query, shell_task, wait_for

DEEP_ARGS = "(repeat('{\"a\": ', 1000) || '1' || repeat('}', 1000))::jsonb"
BAD_URL = "http://[::1/hook"


def _outcomes(url: str) -> dict[str, dict[str, Any]]:
    """Each task's newest run and its occurrence, by task name."""
    rows = query(
        url,
        "SELECT DISTINCT ON (t.name) t.name, r.status, r.error, o.status AS occ,"
        " o.error AS occ_error, o.attempts FROM run r JOIN occurrence o ON o.id = r.occurrence_id"
        " JOIN task t ON t.id = o.task_id ORDER BY t.name, r.id DESC",
    )
    return {row["name"]: row for row in rows}


def _write_all(replica: Replica) -> None:
    """Waits for every held job to end, then writes their outcomes."""
    for run in list(replica.held):
        wait_for(run.job.poll, message=f"run {run.run_id} to finish")
    replica.completer.run_once()
    assert len(replica.held) == 0


def test_a_claimed_row_whose_arguments_nest_too_deep_fails_its_run_and_the_batch_launches(
    client, pool, executors, database_url
) -> None:
    # Fails on 61278d7: run_once raises RecursionError after the claim committed both rows.
    deep = shell_task(client, "deep")
    fine = shell_task(client, "fine")
    occurrence = client.trigger(deep.id, requested_by="test")
    client.trigger(fine.id, requested_by="test")
    query(database_url, f"UPDATE occurrence SET args = {DEEP_ARGS} WHERE id = %s", (occurrence.id,))
    replica = Replica(database_url, pool, executors, "a")
    with structlog.testing.capture_logs() as logs:
        result = replica.launcher.run_once()
    assert (result.claimed, result.launched) == (2, 2)
    (failed,) = [e for e in logs if e["event"] == "run_start_failed"]
    assert failed["occurrence_id"] == occurrence.id
    assert failed["task_id"] == deep.id
    assert "nested 1000 levels deep" in failed["error"]
    _write_all(replica)
    rows = _outcomes(database_url)
    assert rows["fine"]["status"] == "success"
    assert rows["deep"]["status"] == "failed"
    assert rows["deep"]["occ"] == "failed"
    assert rows["deep"]["error"] == rows["deep"]["occ_error"]
    assert rows["deep"]["error"] == "arguments unreadable: JSON nested 1000 levels deep; at most 32"


def test_an_http_task_whose_url_cannot_be_split_fails_its_run_and_the_batch_launches(
    client, pool, executors, database_url
) -> None:
    # Planted by SQL, behind any check at entry. Fails on 61278d7: `urlsplit` raises ValueError
    # in HttpExecutor.start, outside any guard, and the pass fails with both runs `running`.
    bad = shell_task(client, "bad")
    query(
        database_url,
        "UPDATE task SET executor = 'http', payload = jsonb_build_object('url', %s::text)"
        " WHERE id = %s",
        (BAD_URL, bad.id),
    )
    fine = shell_task(client, "fine")
    client.trigger(bad.id, requested_by="test")
    client.trigger(fine.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 2
    _write_all(replica)
    rows = _outcomes(database_url)
    assert rows["fine"]["status"] == "success"
    assert (rows["bad"]["status"], rows["bad"]["occ"]) == ("failed", "failed")
    # The http executor now refuses such a URL itself (issue 44 item 2), in one line naming it.
    assert "[::1/hook" in rows["bad"]["error"]
    assert "\n" not in rows["bad"]["error"]


class _RaisingExecutor:
    """An executor whose start raises, as one could for a value no check foresaw."""

    def start(self, ctx: Any, payload: Any) -> Any:
        raise ValueError(f"cannot take payload {dict(payload)!r}")

    def close(self) -> None:
        pass


def test_a_start_that_raises_fails_its_own_run_and_the_batch_launches(
    client, pool, executors, database_url
) -> None:
    # Forced: the shell executor of this replica raises from start for the `bad` task's payload
    # only. On 61278d7 the exception left Launcher._start unguarded: the pass failed after the
    # claim had committed both runs `running`, and neither job started.
    bad = shell_task(client, "bad", command="echo raise")
    fine = shell_task(client, "fine")
    shell = executors["shell"]

    class PickyShell(_RaisingExecutor):
        def start(self, ctx: Any, payload: Any) -> Any:
            if payload.get("command") == "echo raise":
                return super().start(ctx, payload)
            return shell.start(ctx, payload)

    client.trigger(bad.id, requested_by="test")
    client.trigger(fine.id, requested_by="test")
    replica = Replica(database_url, pool, {**executors, "shell": PickyShell()}, "a")
    assert replica.launcher.run_once().launched == 2
    _write_all(replica)
    rows = _outcomes(database_url)
    assert rows["fine"]["status"] == "success"
    assert (rows["bad"]["status"], rows["bad"]["occ"]) == ("failed", "failed")
    assert rows["bad"]["error"] == "start failed: cannot take payload {'command': 'echo raise'}"


def test_a_run_that_could_not_start_is_retried_as_its_policy_says_and_not_at_once(
    client, pool, executors, database_url
) -> None:
    # The failure is an attempt like any other: with 2 attempts and an hour's backoff, the
    # occurrence goes back to the queue an hour ahead (a claim right after takes nothing), its
    # error shown; a bad row is never claimed again in a hot loop.
    deep = shell_task(client, "deep", max_attempts=2, backoff=timedelta(hours=1))
    occurrence = client.trigger(deep.id, requested_by="test")
    query(database_url, f"UPDATE occurrence SET args = {DEEP_ARGS} WHERE id = %s", (occurrence.id,))
    replica = Replica(database_url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 1
    _write_all(replica)
    (row,) = query(
        database_url,
        "SELECT status, attempts, error, not_before > now() + interval '50 minutes' AS later"
        " FROM occurrence WHERE id = %s",
        (occurrence.id,),
    )
    assert row["status"] == "queued"
    assert row["attempts"] == 1
    assert row["later"]
    assert row["error"].startswith("arguments unreadable:")
    assert replica.launcher.run_once().claimed == 0


def test_the_failure_of_a_run_that_could_not_start_is_fenced_on_its_token(
    client, pool, executors, database_url
) -> None:
    # The failed outcome goes through the completer's fenced write: once the token moved on
    # (a takeover, a cancel), it writes nothing and the run is dropped as fenced.
    deep = shell_task(client, "deep")
    occurrence = client.trigger(deep.id, requested_by="test")
    query(database_url, f"UPDATE occurrence SET args = {DEEP_ARGS} WHERE id = %s", (occurrence.id,))
    replica = Replica(database_url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 1
    query(
        database_url,
        "UPDATE occurrence SET lease_token = lease_token + 1 WHERE id = %s",
        (occurrence.id,),
    )
    result = replica.completer.run_once()
    assert (result.done, result.fenced) == (1, 1)
    (run,) = query(database_url, "SELECT status, error FROM run")
    assert run == {"status": "running", "error": None}


def test_a_claim_sent_with_successes_launches_beside_a_row_it_cannot_read(
    client, pool, executors, database_url
) -> None:
    # The hot path's claim rides with the successes' transaction (Services.write_and_refill):
    # its rows are read in the completer's round trip. On 61278d7 the deep arguments raised
    # RecursionError there, after the successes and the claim had committed.
    first = shell_task(client, "first")
    client.trigger(first.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 1
    deep = shell_task(client, "deep")
    fine = shell_task(client, "fine")
    occurrence = client.trigger(deep.id, requested_by="test")
    client.trigger(fine.id, requested_by="test")
    query(database_url, f"UPDATE occurrence SET args = {DEEP_ARGS} WHERE id = %s", (occurrence.id,))
    for run in list(replica.held):
        wait_for(run.job.poll, message="the first job to end")
    refill = replica.services.write_and_refill()
    assert refill.launched is not None
    assert refill.launched.launched == 2
    _write_all(replica)
    rows = _outcomes(database_url)
    assert [rows[n]["status"] for n in ("first", "fine", "deep")] == [
        "success",
        "success",
        "failed",
    ]
    assert rows["deep"]["error"].startswith("arguments unreadable:")
