"""The schema's own guards: rows that would break exclusion or leave an active row stuck
are database errors, whatever the code above them does."""

import psycopg
import pytest

from tests.support import shell_task


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
