-- fragment (price.py splices it into claim.sql and e_claim.sql as {{picked}}): the oldest queued
-- firing due, in sd_claim_launch_v6's order, with SKIP LOCKED in a MATERIALIZED CTE.
WITH picked AS MATERIALIZED (
    SELECT o.id FROM occurrence o
    WHERE o.status = 'queued' AND o.not_before <= clock_timestamp()
    ORDER BY o.attempts, o.scheduled_for, o.id LIMIT 1 FOR UPDATE SKIP LOCKED
)