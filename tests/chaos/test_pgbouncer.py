"""Real daemons through PgBouncer in transaction pooling mode (docs/operators/deploy.md#pgbouncer).

Two daemons with `--no-listen` share a workload through one PgBouncer; the verdict comes from the
history (every triggered occurrence ran exactly once, nothing left claimed or running) and from
the pooled server connections themselves: no session state (advisory locks, settings, prepared
statements, LISTEN) survives a transaction, which is what transaction pooling needs
(KNOWN-FAILURES 16, 23). `recover` takes over a killed daemon's run through PgBouncer, and the
start lag of polling instead of LISTEN is measured. A read-only server behind PgBouncer is refused
when the daemon connects (target_session_attrs=read-write).
"""

import statistics
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from scheduler_daemon.cli import cli as root_command
from tests.pgbouncer import POOL_SIZE, PgBouncer, running_bouncer
from tests.support import query, wait_for

pytestmark = pytest.mark.slow
TRIGGERS = 20
LAG_SAMPLES = 10
POLL = 1.0  # the default --poll-interval, in seconds


@pytest.fixture
def bouncer(server_url: str) -> Iterator[PgBouncer]:
    yield from running_bouncer(server_url)


def _occurrences(url: str, task: str) -> list[dict[str, Any]]:
    return query(
        url,
        "SELECT o.* FROM occurrence o JOIN task t ON t.id = o.task_id WHERE t.name = %s "
        "ORDER BY o.id",
        (task,),
    )


def _assert_ran_exactly_once(url: str) -> list[dict[str, Any]]:
    """Every successful occurrence has exactly one run, a successful one; nothing is left
    launching or running. Returns the runs."""
    runs = query(url, "SELECT * FROM run ORDER BY id")
    by_occurrence: dict[int, list[str]] = {}
    for run in runs:
        by_occurrence.setdefault(run["occurrence_id"], []).append(run["status"])
    for occurrence in query(url, "SELECT * FROM occurrence WHERE status = 'success'"):
        assert by_occurrence[occurrence["id"]] == ["success"], occurrence
    assert query(url, "SELECT id FROM occurrence WHERE status IN ('launching', 'running')") == []
    assert [r for r in runs if r["status"] == "running"] == []
    return runs


def _server_sessions(bouncer_url: str) -> list[dict[str, Any]]:
    """The state of every pooled server connection: POOL_SIZE clients in a transaction at once
    hold POOL_SIZE distinct server connections, which is all the pool can have."""
    conns = [psycopg.connect(bouncer_url) for _ in range(POOL_SIZE)]
    try:
        rows = []
        for conn in conns:  # each one stays in its transaction until all have read
            rows.append(
                conn.execute("""
                SELECT pg_backend_pid() AS pid,
                       current_setting('lock_timeout') AS lock_timeout,
                       current_setting('statement_timeout') AS statement_timeout,
                       current_setting('idle_in_transaction_session_timeout') AS idle_timeout,
                       (SELECT count(*) FROM pg_prepared_statements) AS prepared,
                       (SELECT count(*) FROM pg_listening_channels()) AS listening
                """).fetchone()
            )
        return [dict(zip(("pid", *_SESSION_STATE), row, strict=True)) for row in rows]
    finally:
        for conn in conns:
            conn.close()


_SESSION_STATE = ("lock_timeout", "statement_timeout", "idle_timeout", "prepared", "listening")


def test_two_daemons_through_pgbouncer_run_every_trigger_once_and_leave_no_session_state(
    bouncer, spawn, cli, database_url
) -> None:
    url = bouncer.url_for(database_url)
    for args in (
        ("tasks", "add", "manual", "--every", "1h", "--command", "sleep 0.1", "--overlap", "allow"),
        ("tasks", "add", "tick-a", "--every", "1s", "--command", "true"),
        ("tasks", "add", "tick-b", "--every", "1s", "--command", "sleep 0.3"),
    ):
        assert cli(*args, url=url).code == 0
    daemons = [spawn(url, f"pgb{i}", "--no-listen", "--concurrency", "3") for i in range(2)]
    ids = [d.instance_id() for d in daemons]
    for _ in range(TRIGGERS):
        assert cli("tasks", "trigger", "manual", url=url).code == 0
    wait_for(
        lambda: all(o["status"] == "success" for o in _occurrences(database_url, "manual")),
        timeout=60,
        message=f"{TRIGGERS} triggered occurrences to succeed",
    )
    for daemon in daemons:
        assert daemon.stop() == 0, daemon.log()

    manual = _occurrences(database_url, "manual")
    assert len(manual) == TRIGGERS
    runs = _assert_ran_exactly_once(database_url)
    assert {r["occurrence_id"] for r in runs} >= {o["id"] for o in manual}
    assert all(any(r["owner"] == i for r in runs) for i in ids), "one daemon did all the work"
    assert _occurrences(database_url, "tick-a"), "the per-second task never fired"
    if "audit" in root_command.commands:
        audit = cli("audit", url=url)
        assert audit.code == 0, audit.out + audit.err

    # Nothing a daemon did outlived its transaction on the connections PgBouncer hands around.
    assert query(database_url, "SELECT * FROM pg_locks WHERE locktype = 'advisory'") == []
    defaults = query(
        database_url,
        "SELECT current_setting('lock_timeout') AS lock_timeout, "
        "current_setting('statement_timeout') AS statement_timeout, "
        "current_setting('idle_in_transaction_session_timeout') AS idle_timeout",
    )[0]
    for session in _server_sessions(url):
        assert {k: session[k] for k in defaults} == defaults, session
        assert (session["prepared"], session["listening"]) == (0, 0), session


def test_recover_through_pgbouncer_takes_over_a_killed_daemons_run(
    bouncer, spawn, cli, database_url
) -> None:
    url = bouncer.url_for(database_url)
    assert cli("tasks", "add", "long", "--every", "1h", "--command", "sleep 60", url=url).code == 0
    daemon = spawn(url, "pgb-victim", "--no-listen")
    daemon.instance_id()
    assert cli("tasks", "trigger", "long", url=url).code == 0
    (run,) = wait_for(
        lambda: query(database_url, "SELECT id FROM run WHERE status = 'running'"),
        message="the long job to start",
    )
    daemon.kill()
    wait_for(
        lambda: query(
            database_url, "SELECT takeover_at < now() AS due FROM run WHERE id = %s", (run["id"],)
        )[0]["due"],
        message="the run's takeover point",
    )
    timing = ("--lease-ttl", "3s", "--lease-grace", "1s", "--instance-expiry", "5s")
    dry = cli("recover", "--dry-run", "--json", *timing, url=url)
    assert dry.code == 0, dry.err
    assert dry.json()["ids"]["taken_over"] == [run["id"]]
    done = cli("recover", "--json", *timing, url=url)
    assert done.code == 0, done.err
    assert done.json()["ids"]["taken_over"] == [run["id"]]
    assert query(database_url, "SELECT status FROM run WHERE id = %s", (run["id"],)) == [
        {"status": "interrupted"}
    ]
    again = cli("recover", "--json", *timing, url=url)
    assert again.code == 0, again.err
    assert again.json()["counts"]["taken_over"] == 0


def _start_lags(cli, url: str, database_url: str, done: int = 0) -> list[float]:
    """Seconds from each manual trigger's commit to its run's start, on the database clock.

    Trigger k comes k/LAG_SAMPLES of a poll interval after the previous run started. Without the
    offsets every trigger would land just after a pass and wait a whole interval: the offsets
    spread the samples over the interval; they synchronize nothing."""
    lags = []
    for i in range(LAG_SAMPLES):
        threading.Event().wait(POLL * i / LAG_SAMPLES)
        assert cli("tasks", "trigger", "probe", url=url).code == 0
        (row,) = wait_for(
            lambda n=done + i + 1: query(
                database_url,
                "SELECT extract(epoch FROM r.started_at - o.created_at)::float AS lag "
                "FROM occurrence o JOIN task t ON t.id = o.task_id "
                "JOIN run r ON r.occurrence_id = o.id "
                "WHERE t.name = 'probe' AND o.occurrence_seq = %s",
                (n,),
            ),
            message=f"probe run {done + i + 1} to start",
        )
        lags.append(row["lag"])
    return lags


def _summary(lags: list[float]) -> str:
    return f"median {statistics.median(lags):.3f}s, max {max(lags):.3f}s over {len(lags)} triggers"


def test_polling_instead_of_listen_starts_triggered_work_within_one_poll_interval(
    bouncer, spawn, cli, database_url
) -> None:
    url = bouncer.url_for(database_url)
    command = ("tasks", "add", "probe", "--every", "1h", "--command", "true", "--overlap", "allow")
    assert cli(*command, url=url).code == 0
    polling = spawn(url, "pgb-poll", "--no-listen", "--poll-interval", f"{POLL:g}s")
    polling.instance_id()
    polled = _start_lags(cli, url, database_url)
    assert polling.stop() == 0, polling.log()
    # The same trigger, with LISTEN on a direct connection, for comparison.
    listening = spawn(database_url, "direct-listen", "--poll-interval", f"{POLL:g}s")
    listening.instance_id()
    woken = _start_lags(cli, url, database_url, done=LAG_SAMPLES)
    assert listening.stop() == 0, listening.log()
    print(
        f"\nstart lag, --poll-interval {POLL:g}s: through PgBouncer with --no-listen "
        f"{_summary(polled)}; direct with LISTEN {_summary(woken)}"
    )
    # Idle, a daemon sleeps at most one poll interval; then a pass dispatches and launches.
    assert max(polled) < POLL + 1.5, polled
    assert statistics.median(woken) < statistics.median(polled), (woken, polled)


def test_listen_through_transaction_pooling_is_noticed_taken_back_and_replaced_by_polling(
    bouncer, spawn, cli, database_url
) -> None:
    # On 646db2b a daemon left with LISTEN on behind PgBouncer in transaction mode failed
    # silently: no wake-up ever came, the LISTEN stayed on a pooled server connection, and
    # nothing in its log said so (issue 29).
    url = bouncer.url_for(database_url)
    assert cli("tasks", "add", "job", "--every", "1h", "--command", "true", url=url).code == 0
    daemon = spawn(url, "pgb-listen")  # LISTEN left on, as the shipped ConfigMap once did
    daemon.instance_id()
    (warning,) = wait_for(
        lambda: [line for line in daemon.log().splitlines() if '"listen_unavailable"' in line],
        message="the daemon to notice that its LISTEN hears nothing",
    )
    assert "--no-listen" in warning
    assert cli("tasks", "trigger", "job", url=url).code == 0  # polling still finds it
    wait_for(
        lambda: query(database_url, "SELECT 1 FROM run WHERE status = 'success'"),
        message="the triggered run to succeed by polling",
    )
    assert daemon.stop() == 0
    assert '"listen_unavailable"' not in daemon.log().split(warning, 1)[1]  # said once


def test_a_read_only_server_behind_pgbouncer_is_refused_at_connect(
    bouncer: PgBouncer, database_url: str
) -> None:
    # libpq's target_session_attrs=read-write check (storage.database.read_write) reads the
    # settings PgBouncer reports for its server connections; on eddeb28 this connected and only
    # the first write failed.
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from scheduler_daemon.storage.database import connect
    from scheduler_daemon.storage.error import DatabaseUnavailable

    name = conninfo_to_dict(database_url)["dbname"]
    query(database_url, f"ALTER DATABASE {name} SET default_transaction_read_only = on")
    url = bouncer.url_for(database_url)
    with pytest.raises(DatabaseUnavailable, match="session is read-only"):
        connect(url).close()
    with connect(make_conninfo(url, target_session_attrs="any"), autocommit=True) as conn:
        row = conn.execute("SHOW transaction_read_only").fetchone()
    assert row == {"transaction_read_only": "on"}
