"""Expand: the hot path's functions join by key only (no hash or merge joins).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06

The claim and the batched successes are PL/pgSQL functions with sequential scans turned off, so
their plans reach rows through indexes; but a join could still be a hash join whose other side
walks a whole index. The planner chose one when its statistics promised a small table or many
rows per batch, and a function keeps that plan in its session until the next ANALYZE:
- after autovacuum analyzed a backlog (an outage's catch-up, a burst of triggers), it expects a
  tenth of the queued rows per claim, and the claim updated its rows through a hash join over
  the whole occurrence table's primary key: with 30,000 queued, 3 daemons ran 1,108 no-op
  jobs/s instead of 3,861 and the server spent 0.87 ms a job instead of 0.16;
- after it analyzed a young run table (a new fleet's first minute), the success joined its
  batch to every run's primary key, each call, as the table grew.
Turning hash and merge joins off in the functions leaves nested loops, each row looked up by its
key, whatever the statistics say (tests/integration/test_query_plans.py builds both cases).

Settings of the existing functions only: the same functions, arguments and results, so a build
before 0014 calls them as before and gains the same plans.
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None
phase = "expand"

FUNCTIONS = (
    "sd_claim_launch_v1(bigint, integer, text, interval, interval, text, timestamptz)",
    "sd_succeed_runs_v1(bigint[], bigint[], bigint[], bigint[], integer[], integer[], text[],"
    " text[], text, text, boolean, timestamptz)",
    "sd_succeed_runs_v2(bigint[], bigint[], bigint[], bigint[], integer[], integer[], text[],"
    " text[], text, text, boolean, timestamptz)",
)


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    for function in FUNCTIONS:
        op.execute(
            f"ALTER FUNCTION {function} SET enable_hashjoin = off SET enable_mergejoin = off"
        )


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    for function in FUNCTIONS:
        op.execute(f"ALTER FUNCTION {function} RESET enable_hashjoin RESET enable_mergejoin")
