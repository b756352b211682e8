-- C's mover, about once per 100 jobs (a random draw), up to 500 ended rows a batch: the ended
-- hot rows and their runs deleted and written to the unpartitioned history in one statement.
\set draw random(1, 100)
\if :draw = 1
WITH moved AS MATERIALIZED (
    SELECT id FROM occurrence WHERE finished_at IS NOT NULL
    ORDER BY finished_at, id LIMIT 500 FOR UPDATE SKIP LOCKED
), ended AS (
    DELETE FROM run r USING moved WHERE r.occurrence_id = moved.id RETURNING r.*
), occ AS (
    DELETE FROM occurrence o USING moved WHERE o.id = moved.id RETURNING o.*
{{write_history}}
\endif
