"""A followed run's output, written live by its owner with its renewals (ADR 0014): only while a
follower's mark is fresh, only when it changed, fenced on owner and token, NUL-safe; and
`runs logs -f` against a real daemon process sees the lines before the run ends."""

import os
import subprocess
import sys
import time
from typing import Any

from scheduler_daemon.domain.held import Lease
from scheduler_daemon.storage import run_store
from tests.support import launched_shell_run, query, wait_for

PRINTS_ONE = "echo one; sleep 30"


def _output(url: str) -> Any:
    (row,) = query(url, "SELECT output_tail FROM run")
    return row["output_tail"]


def _follow(url: str, ago: str = "0 s") -> None:
    """What a follower's poll writes: the run's mark, at the database's clock."""
    query(url, "UPDATE run SET followed_at = clock_timestamp() - %s::interval RETURNING id", (ago,))


def _printed(run: Any, text: str) -> None:
    wait_for(lambda: text in (run.job.live_output() or ""), timeout=10, message=f"{text!r}")


def _daemon_run(cli: Any, spawn: Any, url: str, task: tuple[str, str, str], where: str) -> Any:
    """`task` is (name, command, daemon): adds an hourly task `name` running `command`, starts
    a real daemon named `daemon`, triggers the task once; its run's row (its id) once `where`
    (an SQL condition on the run) holds."""
    name, command, daemon = task
    assert cli("tasks", "add", name, "--every", "1h", "--command", command).code == 0
    spawn(url, daemon).instance_id()
    assert cli("tasks", "trigger", name).code == 0
    (run,) = wait_for(
        lambda: query(url, f"SELECT id FROM run WHERE {where}"),
        timeout=30,
        message=f"a run where {where}",
    )
    return run


def test_an_unfollowed_run_gets_no_output_written_and_a_followed_one_does(
    client, pool, executors, database_url
) -> None:
    _, _, replica, run = launched_shell_run(
        client, pool, executors, database_url, command=PRINTS_ONE
    )
    _printed(run, "one")
    assert replica.keeper.run_once() == set()
    assert _output(database_url) is None  # nobody follows: nothing more than a renewal
    _follow(database_url, ago="10 s")  # a mark older than the window (one TTL, 3 s here)
    assert replica.keeper.run_once() == set()
    assert _output(database_url) is None
    _follow(database_url)
    assert replica.keeper.run_once() == set()
    assert _output(database_url) == "one\n"


def test_an_unchanged_output_is_not_written_again(client, pool, executors, database_url) -> None:
    _, _, replica, run = launched_shell_run(
        client, pool, executors, database_url, command=PRINTS_ONE
    )
    _printed(run, "one")
    _follow(database_url)
    replica.keeper.run_once()
    assert _output(database_url) == "one\n"
    # Were the owner to write on every renewal, its next pass would put "one\n" back.
    query(database_url, "UPDATE run SET output_tail = 'planted' RETURNING id")
    replica.keeper.run_once()
    assert _output(database_url) == "planted"


def test_a_fenced_renewal_writes_no_output(
    client, pool, executors, database_url, monkeypatch
) -> None:
    """Fails on a keeper that sent a followed run's output before (or without) learning its
    renewal was fenced: the write is fenced in SQL too, so the test also watches that none is
    sent (a spy on the real write, which still runs)."""
    from scheduler_daemon.storage import run_store

    sent: list[int] = []
    real = run_store.write_output

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        sent.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(run_store, "write_output", spy)
    _, _, replica, run = launched_shell_run(
        client, pool, executors, database_url, command=PRINTS_ONE
    )
    _printed(run, "one")
    _follow(database_url)
    # A second session raises the token, as a takeover or a cancel does.
    query(database_url, "UPDATE run SET lease_token = lease_token + 1 RETURNING id")
    assert replica.keeper.run_once() == {run.run_id}
    assert _output(database_url) is None
    assert sent == []


def test_the_output_write_itself_is_fenced_on_owner_and_token(
    client, pool, executors, database_url
) -> None:
    """The window between a renewal and its output write: a token raised there leaves the row
    alone. Fails on a write matched by run id alone."""
    run = launched_shell_run(client, pool, executors, database_url, command=PRINTS_ONE).run
    lease = Lease(run.run_id, run.occurrence_id, run.token)
    query(database_url, "UPDATE run SET lease_token = lease_token + 1 RETURNING id")
    with pool.connection() as conn:
        assert not run_store.write_output(conn, owner="a", lease=lease, output_tail="late")
        raised = lease._replace(token=run.token + 1)
        assert not run_store.write_output(conn, owner="b", lease=raised, output_tail="late")
        assert run_store.write_output(conn, owner="a", lease=raised, output_tail="ours")
    assert _output(database_url) == "ours"


def test_a_nul_byte_and_a_long_output_are_written_storable(
    client, pool, executors, database_url
) -> None:
    """A job printing a NUL once crashed every replica's completion (issue 28); live, it is
    replaced as at the end, and the last 64 KiB are cut on a character boundary."""
    command = "yes é | head -n 40000 | tr -d '\\n'; printf 'a\\000b\\n'; echo end; sleep 30"
    _, _, replica, run = launched_shell_run(client, pool, executors, database_url, command=command)
    _printed(run, "end")
    _follow(database_url)
    assert replica.keeper.run_once() == set()
    (row,) = query(database_url, "SELECT output_tail, octet_length(output_tail) AS size FROM run")
    assert row["output_tail"].endswith("éééa\ufffdb\nend\n")
    assert row["size"] <= 65536
    assert "\x00" not in row["output_tail"]


def test_runs_logs_follow_shows_the_lines_of_a_real_daemons_run_before_it_ends(
    cli, database_url, spawn, tmp_path
) -> None:
    """The job prints two lines, then cannot end until the test has read the first from the
    follower (a file it waits for, 30 s at most): seeing it is seeing it before the run ended.
    Fails on a build whose output reaches the database only at the end."""
    seen = tmp_path / "seen"
    script = (
        "echo line1; sleep 0.3; echo line2; "
        f"for i in $(seq 300); do [ -e {seen} ] && break; sleep 0.1; done; echo line3"
    )
    run = _daemon_run(cli, spawn, database_url, ("talk", script, "follow"), "status = 'running'")
    follower = subprocess.Popen(
        [sys.executable, "-m", "scheduler_daemon", "runs", "logs", "-f", str(run["id"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SCHEDULER_DATABASE_URL": database_url},
    )
    assert follower.stdout is not None
    first = follower.stdout.readline()
    (status,) = query(database_url, "SELECT status FROM run WHERE id = %s", (run["id"],))
    assert (first, status["status"]) == ("line1\n", "running")
    seen.touch()  # now the job may end
    out = follower.stdout.read()  # through the reader that buffered what followed line1
    assert follower.wait(60) == 0, follower.stderr.read() if follower.stderr else ""
    assert first + out == "line1\nline2\nline3\n"  # each line once, in order
    (done,) = query(database_url, "SELECT status, output_tail FROM run WHERE id = %s", (run["id"],))
    assert done == {"status": "success", "output_tail": "line1\nline2\nline3\n"}


def test_runs_logs_follow_of_a_failed_run_exits_10_and_says_why(cli, database_url, spawn) -> None:
    bad = ("bad", "echo x; exit 3", "fail")
    run = _daemon_run(cli, spawn, database_url, bad, "finished_at IS NOT NULL")
    started = time.monotonic()
    result = cli("runs", "logs", "-f", str(run["id"]))
    assert (result.code, result.out) == (10, "x\n")
    assert result.err == f"run {run['id']} ended failed: exit code 3\n"
    assert time.monotonic() - started < 5  # a finished run is not waited on
    plain = cli("runs", "logs", str(run["id"]), "--json").json()
    assert (plain["status"], plain["error_summary"], plain["output_tail"]) == (
        "failed",
        "exit code 3",
        "x\n",
    )
    assert cli("runs", "logs", "424242").code == 2
    refused = cli("runs", "logs", "-f", "--json", str(run["id"]))
    assert refused.code == 2
