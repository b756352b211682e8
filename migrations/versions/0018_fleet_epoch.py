"""Expand: fleet_epoch, when the fleet first saw each (system identifier, timeline) of its
database.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06

No run is taken over within TTL + grace of the database server's start
(`pg_postmaster_start_time()`), so that owners cut off by a restart renew first. A promotion
changes nothing that function reports: after a switchover with a 15 s gap every running run was
taken over 0.1-0.8 s after the promotion, though every owner was alive and about to renew
(issue 32). The epoch the database defines is its system identifier (`pg_control_system()`) and
its timeline (from `pg_walfile_name(pg_current_wal_lsn())`; `pg_control_checkpoint()` lags a
promotion by minutes). Each reconciliation pass (and `recover`) first records when the fleet
first saw the current epoch, `ON CONFLICT DO NOTHING`; the takeover guards count the quiet
period from the latest of the server's start and that first sighting, when the fleet had seen an earlier epoch (the first it ever records, on its
first pass after this revision, is no change of life).

Old builds never read or write it: they keep the restart rule alone, and may still take over
live runs after a promotion until every replica runs this build. The downgrade drops the table.
"""

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None
phase = "expand"


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(
        """
        CREATE TABLE fleet_epoch (
            system_identifier bigint NOT NULL,
            timeline bigint NOT NULL,
            first_seen_at timestamptz NOT NULL,
            CONSTRAINT fleet_epoch_pkey PRIMARY KEY (system_identifier, timeline)
        )
        """
    )


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("DROP TABLE fleet_epoch")
