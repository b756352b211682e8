-- sd_succeed_runs_v4: records a batch of successful runs, fenced, in one call.
--
-- Called by the named query `run_succeed_many` (sql/run.sql), sent after the per-transaction
-- limits as one simple query (`database.one_trip`), often with the next claim behind it. Its
-- plans are made once per server process, without sequential scans, and it looks each run of
-- the batch up by key, so a plan made on the young tables of a new fleet does not walk every
-- running run once they grow; nor hash or merge joins, so no statistics make it read a whole
-- table. No decision needs the locked rows, since success is final whatever the attempts or a
-- cancel request.
-- - Locks only the batch's one-shot task rows, then the occurrences, then the runs, each in id
--   order (task -> occurrence -> run, the one lock order). A recurring task's row is off the
--   success path: it is neither locked nor written (its newest outcome is read from its
--   occurrences through occurrence_task_outcome_idx), so its `last_*` columns miss successes.
--   A task made one-shot after this read is finalized by the reconciler.
-- - One statement ends each run still ours (`p_owner`) at its token whose occurrence is still
--   running at that token, and finishes those occurrences; a run fenced out is not written.
-- - The one-shots among them are shown on their tasks by sd_show_outcomes_v1 (show_outcomes.sql,
--   the one rule), in the same transaction; only a batch holding a one-shot pays the call.
-- - Wakes idle daemons (a slot came free) when `p_wake`: the writer's own loop claims right
--   after, so its peers are needed only when it will not.
-- Returns the ids of the runs written (a missing one was fenced: nothing was written for it).
--
-- Versions: v1 (migration 0012), v2 keyed batches (0013, 0014), v3 the shared outcome rule
-- (0017), v4 a recurring task's row off the path (0021). This file is the live text (ADR 0028).

CREATE OR REPLACE FUNCTION sd_succeed_runs_v4(
    p_ids bigint[], p_tokens bigint[], p_occurrence_ids bigint[], p_task_ids bigint[],
    p_exit_codes integer[], p_http_statuses integer[], p_output_tails text[], p_errors text[],
    p_owner text, p_channel text, p_wake boolean, p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $function$
#variable_conflict use_column
DECLARE
    v_once bigint[];
    v_ids bigint[];
    v_task_ids bigint[];
    v_occurrence_ids bigint[];
    v_seqs bigint[];
    v_scheduled_fors timestamptz[];
    v_errors text[];
    v_decides boolean[];
BEGIN
    -- Only one-shot tasks' rows are locked (first, in id order): a recurring task's row is off
    -- the success path. A task made one-shot after this read is finalized by the reconciler.
    SELECT coalesce(array_agg(id), '{}') INTO v_once FROM (
        SELECT id FROM task WHERE id = ANY(p_task_ids) AND schedule_kind = 'once'
        ORDER BY id FOR UPDATE) locked;
    PERFORM 1 FROM occurrence WHERE finished_at IS NULL AND id = ANY(p_occurrence_ids)
    ORDER BY id FOR UPDATE;
    PERFORM 1 FROM run WHERE finished_at IS NULL AND id = ANY(p_ids) ORDER BY id FOR UPDATE;
    IF p_wake THEN
        PERFORM pg_notify(p_channel, 'finished');
    END IF;
    WITH mine AS MATERIALIZED (
        -- The runs of the batch still ours at their token, whose occurrence is still running
        -- at that token: each looked up by its keys inside the loop over the batch.
        SELECT f.* FROM unnest(p_ids, p_tokens, p_occurrence_ids, p_exit_codes,
                               p_http_statuses, p_output_tails, p_errors)
                 AS f(id, token, occurrence_id, exit_code, http_status, output_tail, error)
        CROSS JOIN LATERAL (
            SELECT 1 FROM run r JOIN occurrence o ON o.id = r.occurrence_id
            WHERE r.finished_at IS NULL AND o.finished_at IS NULL
              AND r.id = f.id AND r.occurrence_id = f.occurrence_id AND r.lease_token = f.token
              AND r.owner = p_owner
              AND o.status = 'running' AND o.lease_token = f.token
            OFFSET 0) fenced
    ), run_gone AS MATERIALIZED (
        -- Each run and its occurrence end by a move (issue 47; sql/run.sql's fragment run_end
        -- says why): deleted from the default partition, inserted through the parent.
        DELETE FROM run r USING mine f
        WHERE r.finished_at IS NULL AND r.id = f.id
        RETURNING r, f.exit_code, f.http_status, f.output_tail, f.error
    ), ended AS MATERIALIZED (
        INSERT INTO run OVERRIDING SYSTEM VALUE
        SELECT n.* FROM run_gone g CROSS JOIN LATERAL jsonb_populate_record(g.r,
            jsonb_build_object('status', 'success', 'exit_code', g.exit_code,
                'http_status', g.http_status, 'output_tail', g.output_tail, 'error', g.error,
                'finished_at', coalesce(p_now, clock_timestamp()), 'finished_by', p_owner)) n
        RETURNING id, occurrence_id, error
    ), occurrence_gone AS MATERIALIZED (
        DELETE FROM occurrence o USING ended
        WHERE o.finished_at IS NULL AND o.id = ended.occurrence_id
        RETURNING o, ended.error
    ), finished AS MATERIALIZED (
        INSERT INTO occurrence OVERRIDING SYSTEM VALUE
        SELECT n.* FROM occurrence_gone g CROSS JOIN LATERAL jsonb_populate_record(g.o,
            jsonb_build_object('status', 'success', 'error', g.error, 'reason', NULL,
                'finished_at', coalesce(p_now, clock_timestamp()),
                'updated_at', coalesce(p_now, clock_timestamp()), 'claim_owner', NULL)) n
        RETURNING task_id, id AS occurrence_id, occurrence_seq AS seq, scheduled_for,
                  error, trigger <> 'manual' AS decides
    )
    SELECT (SELECT array_agg(id) FROM ended), array_agg(task_id), array_agg(occurrence_id),
           array_agg(seq), array_agg(scheduled_for), array_agg(error), array_agg(decides)
    INTO v_ids, v_task_ids, v_occurrence_ids, v_seqs, v_scheduled_fors, v_errors, v_decides
    FROM finished WHERE task_id = ANY(v_once);
    IF v_task_ids IS NOT NULL THEN
        PERFORM sd_show_outcomes_v1(v_task_ids, v_occurrence_ids, v_seqs, v_scheduled_fors,
            array_fill('success'::text, ARRAY[cardinality(v_task_ids)]), v_errors,
            array_fill('completed'::text, ARRAY[cardinality(v_task_ids)]), v_decides, p_now);
    END IF;
    RETURN QUERY SELECT unnest(coalesce(v_ids, '{}'));
END
$function$;
