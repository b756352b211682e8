"""The schema's own guards: rows that would break exclusion or leave an active row stuck
are database errors, whatever the code above them does."""

import psycopg
import pytest

from tests.support import Replica, query, shell_task


def test_a_second_active_occurrence_of_a_forbid_task_is_a_database_error(client, db) -> None:
    task = shell_task(client)
    client.trigger(task.id, requested_by="test")
    with pytest.raises(psycopg.errors.UniqueViolation, match="occurrence_forbid_active_key"):
        db.execute(
            "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, "
            "overlap, status, not_before) VALUES (%s, 99, now(), 'manual', 'forbid', "
            "'queued', now())",
            (task.id,),
        )


def test_an_active_row_cannot_hold_a_null_claim_or_lease_column(client, db) -> None:
    # airflow#66773: `heartbeat < limit` is never true for NULL, so such rows stayed stuck forever.
    task = shell_task(client)
    with pytest.raises(psycopg.errors.CheckViolation, match="occurrence_claim_check"):
        db.execute(
            "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, "
            "overlap, status, not_before) VALUES (%s, 1, now(), 'manual', 'allow', "
            "'launching', now())",
            (task.id,),
        )
    occ = client.trigger(task.id, requested_by="test")
    with pytest.raises(psycopg.errors.NotNullViolation):
        db.execute(
            "INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at, "
            "takeover_at, build_revision) VALUES (%s, 1, 'o', 1, now(), NULL, 'planted')",
            (occ.id,),
        )


@pytest.mark.parametrize(
    ("column", "value", "constraint"),
    [
        ("attempts", 2147483647, "occurrence_attempts_check"),
        ("interruptions", 2147483647, "occurrence_attempts_check"),
        ("attempts", 1000000001, "occurrence_attempts_check"),
        ("lease_token", 2**63 - 1, "occurrence_lease_token_check"),
        ("lease_token", 2**62, "occurrence_lease_token_check"),
    ],
)
def test_an_occurrence_past_the_claims_arithmetic_is_a_database_error(
    client, db, column: str, value: int, constraint: str
) -> None:
    """Catches the hostile row of issue 44: one queued occurrence whose `attempts + 1` or
    `greatest(lease_token, floor) + 1` overflowed made every claim of the fleet raise
    NumericValueOutOfRange, so no daemon launched anything. Before the bounds (issue 45) the
    UPDATE was accepted."""
    occ = client.trigger(shell_task(client).id, requested_by="test")
    with pytest.raises(psycopg.errors.CheckViolation, match=constraint):
        db.execute(f"UPDATE occurrence SET {column} = %s WHERE id = %s", (value, occ.id))
    db.execute(
        "UPDATE occurrence SET attempts = 1000000000, lease_token = %s WHERE id = %s",
        (2**62 - 1, occ.id),
    )  # the bounds themselves are allowed


def test_a_run_past_the_claims_token_arithmetic_is_a_database_error(client, db) -> None:
    """Catches a run whose lease token is where an occurrence's may no longer be: the
    reconciler's takeover raises the occurrence's token above its runs'."""
    occ = client.trigger(shell_task(client).id, requested_by="test")
    with pytest.raises(psycopg.errors.CheckViolation, match="run_lease_token_check"):
        db.execute(
            "INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at, "
            "takeover_at, build_revision) VALUES (%s, 1, 'o', %s, now(), now(), 'planted')",
            (occ.id, 2**62),
        )


@pytest.mark.parametrize("bound", [("attempts", 1000000000), ("lease_token", 2**62 - 1)])
def test_a_queued_occurrence_at_a_bound_is_passed_over_and_the_others_launch(
    client, database_url, pool, executors, bound: tuple[str, int]
) -> None:
    """Catches a claim whose `+ 1` takes a row written at a bound past it: the CHECK would
    then fail every claim of the fleet, as the overflow did before the bounds."""
    column, value = bound
    stuck = client.trigger(shell_task(client, "stuck").id, requested_by="test")
    query(database_url, f"UPDATE occurrence SET {column} = %s WHERE id = %s", (value, stuck.id))
    other = client.trigger(shell_task(client, "other").id, requested_by="test")
    replica = Replica(database_url, pool, executors, "a")
    assert replica.launcher.run_once().launched == 1
    replica.finished()
    rows = query(
        database_url,
        "SELECT id, status FROM occurrence WHERE id = ANY(%s) ORDER BY id",
        ([stuck.id, other.id],),
    )
    assert [(r["id"], r["status"]) for r in rows] == [(stuck.id, "queued"), (other.id, "running")]
