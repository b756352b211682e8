"""Someone outside the fleet holds the fleet budget's advisory lock (issue 29): any role can, with
no privilege. The claims cannot start anything meanwhile; the launcher names the holder (at most
one line a minute) and says how long it has been blocked, and `status` names it too."""

import psycopg
from psycopg.rows import dict_row
from structlog.testing import capture_logs

from scheduler_daemon.storage import fleet_store
from tests.lock_holder import APPLICATION, as_role, outside_holder, unprivileged_role
from tests.support import Replica, query, shell_task


def test_any_role_holding_the_budget_lock_is_named_even_to_a_role_without_stats_rights(
    database_url,
) -> None:
    with outside_holder(database_url) as holder, unprivileged_role(database_url) as reader:
        with psycopg.connect(database_url, row_factory=dict_row) as admin:
            (seen,) = fleet_store.budget_lock_holders(admin)
        assert (seen.pid, seen.role, seen.application_name) == (
            holder.pid,
            holder.role,
            APPLICATION,
        )
        assert seen.state == "idle in transaction"
        assert seen.in_transaction is not None
        # Without pg_read_all_stats another role's state and xact_start read as NULL: the pid,
        # the role and the application name are still there.
        with psycopg.connect(as_role(database_url, reader), row_factory=dict_row) as conn:
            (limited,) = fleet_store.budget_lock_holders(conn)
        assert (limited.pid, limited.role, limited.application_name) == (
            holder.pid,
            holder.role,
            APPLICATION,
        )
        assert (limited.state, limited.in_transaction) == (None, None)
        holder.release()
        with psycopg.connect(database_url, row_factory=dict_row) as admin:
            assert fleet_store.budget_lock_holders(admin) == []


def test_a_claim_blocked_by_an_outside_holder_names_it_once_and_claims_when_it_lets_go(
    client, pool, executors, database_url
) -> None:
    # Catches the build before issue 29's fix: the claim's lock timeout was a failed pass (a
    # `pass_failed` line a pass with the error alone), and nobody learnt who held the lock.
    task = shell_task(client)
    client.trigger(task.id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    with outside_holder(database_url) as holder, capture_logs() as logs:
        first = replica.launcher.run_once()
        assert (first.launched, first.budget_lock_timeout, first.more) == (0, True, False)
        assert first.budget_blocked_seconds is not None
        assert first.budget_blocked_seconds >= 4  # its whole wait (5 s)
        # While blocked, a claim is not sent with a batch of successes (it would hold them
        # back for its whole wait, then undo them): the successes go alone.
        assert replica.launcher.request(freed=1) is None
        second = replica.launcher.run_once()
        assert second.budget_lock_timeout
        assert second.budget_blocked_seconds is not None
        assert second.budget_blocked_seconds > first.budget_blocked_seconds
        holder.release()
        third = replica.launcher.run_once()
    held = [e for e in logs if e["event"] == "budget_lock_held"]
    assert len(held) == 1, logs  # at most one line a minute
    assert held[0]["log_level"] == "warning"
    assert held[0]["holder_pid"] == holder.pid
    assert held[0]["holder_role"] == holder.role
    assert held[0]["holder_application_name"] == APPLICATION
    assert held[0]["holders"] == 1
    assert held[0]["instance_id"] == "a"
    assert (third.launched, third.budget_blocked_seconds, third.budget_lock_timeout) == (
        1,
        0.0,
        False,
    )
    (released,) = [e for e in logs if e["event"] == "budget_lock_released"]
    assert released["blocked_seconds"] >= second.budget_blocked_seconds
    assert query(database_url, "SELECT status FROM occurrence") == [{"status": "running"}]


def test_status_names_a_holder_that_keeps_the_budget_lock_and_nobody_when_it_is_free(
    cli, database_url
) -> None:
    assert cli("status", "--json").json()["budget_lock_holders"] == []
    assert "budget lock held" not in cli("status").out
    with outside_holder(database_url) as holder:
        (shown,) = cli("status", "--json").json()["budget_lock_holders"]
        text = cli("status").out
    assert shown["pid"] == holder.pid
    assert shown["role"] == holder.role
    assert shown["application_name"] == APPLICATION
    assert shown["state"] == "idle in transaction"  # the test's role is a superuser
    assert shown["in_transaction_seconds"] >= 1  # seen at two reads a second apart
    assert shown["prepared"] is None
    (line,) = [line for line in text.splitlines() if line.startswith("budget lock held")]
    assert line.startswith(f"budget lock held by pid {holder.pid} (role {holder.role}, ")
    assert f"application '{APPLICATION}'" in line
