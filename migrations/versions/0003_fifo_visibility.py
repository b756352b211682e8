"""Record what each claim could see, so `audit` judges per-key order exactly.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02

- `occurrence.created_xid`: the transaction that inserted the occurrence (a column default, so every
  writer of any version fills it).
- `occurrence.first_claim_snapshot`: the snapshot of the statement that first claimed it.

Per-key order is "no occurrence starts while an older one of its key, already queued, waits". Which
occurrences were queued when a claim ran is a fact about commits, not about timestamps: a
dispatcher's `created_at` is its transaction's start, and a transaction frozen or slowed between
insert and commit made an older occurrence look queued before it really was (a false finding of
the soak, seed 11). With both columns, `pg_visible_in_snapshot(x.created_xid,
y.first_claim_snapshot)` says exactly whether x was visible to y's claim. Rows written before this
revision have neither and are judged by `created_at` as before.

Both columns are nullable with no default on existing rows (no table rewrite).
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
ALTER TABLE occurrence ADD COLUMN created_xid xid8, ADD COLUMN first_claim_snapshot pg_snapshot;
ALTER TABLE occurrence ALTER COLUMN created_xid SET DEFAULT pg_current_xact_id();
""")


def downgrade() -> None:
    op.execute("ALTER TABLE occurrence DROP COLUMN first_claim_snapshot, DROP COLUMN created_xid;")
