-- sd_partitions_v1: the history's partition upkeep (ADR 0033, issue 47 items 3-4), in the
-- caller's transaction, at most one at a time fleet-wide; returns what it did as JSON.
--
-- `occurrence` and `run` are partitioned by range of `finished_at`, each with a DEFAULT
-- partition (the hot set: every active row has finished_at NULL; an ended row whose dated
-- partition does not exist falls back there). Dated partitions are `<table>_pYYYYMMDDHH24MI`,
-- named by their lower bound in UTC. In one call, for both tables:
-- (b) drop: every dated partition whose upper bound is at or before now() - p_retention (the
--     fleet's `history-retention`; NULL keeps everything) is detached; its rows that must
--     survive are written back through the parent, so they land in the DEFAULT partition (the
--     keeper: the row-by-row prune deletes them later by their own retention): the rows
--     retention_doomed (sql/retention.sql) would keep (a task's own longer retention; a live
--     task's newest outcome and what follows it; an occurrence with a running run) and a run
--     whose occurrence still exists. Of the rows that go, the scheduled firings raise their
--     task's `task_pruned` mark (as retention_prune does), and their `firing_key` rows and
--     delivered notifications are deleted. Then the detached table is dropped.
-- (a) create: from now() to now() + p_ahead, then from the oldest row that fell back into
--     the DEFAULT partition and is still inside the retention (an upkeep outage; at most 24
--     such ranges a call, `backlog` saying more wait), each range not yet covered gets a table made standalone (LIKE the parent, with a CHECK matching its
--     bounds, so ATTACH need not scan it), the DEFAULT's rows of that range moved into it
--     (DELETE ... RETURNING into INSERT), then ATTACH PARTITION (ACCESS EXCLUSIVE on the DEFAULT
--     partition, which it scans: it is the small hot set). Bounds are aligned to multiples of
--     p_interval from the epoch, and never overlap a partition made before with another
--     interval: a changed interval only shapes the partitions made after it.
-- Every wait for a lock is bounded by the function's `lock_timeout` (100 ms): a held lock
-- makes the call fail with 55P03, which is caught here, recorded in `partition_upkeep`
-- (`status` shows it) and returned as `error`, with everything of this call undone. A second
-- caller while one runs returns at once with `busy` (pg_try_advisory_xact_lock, transaction
-- scoped: PgBouncer-safe).
--
-- SECURITY DEFINER: the daemon role may neither create nor drop tables; this is the only way
-- it changes the partitions. Tables it creates are owned by the function's owner and granted to
-- nobody: every role reads them through the parent, under the parent's (column) privileges.
-- After the function, as end_pause.sql: its search path pinned, EXECUTE revoked from PUBLIC
-- and granted to the daemon roles (storage/roles.py DEFINER_FUNCTIONS).
--
-- This file is the live text (ADR 0028).

CREATE OR REPLACE FUNCTION sd_partitions_v1(
    p_interval interval, p_ahead interval, p_retention interval)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET lock_timeout = '100ms'
SET TimeZone = 'UTC'
AS $function$
DECLARE
    -- "sdpartns": recognisable in pg_locks
    c_lock constant bigint := 8315181342431293043;
    c_bounds constant text := $re$FROM \('([^']+)'\) TO \('([^']+)'\)$re$;
    v_now constant timestamptz := now();
    v_step numeric;
    v_until timestamptz;
    v_cutoff timestamptz;
    v_parent text;
    v_default regclass;
    v_cols text;
    v_part record;
    v_t timestamptz;
    v_next timestamptz;
    v_lo timestamptz;
    v_hi timestamptz;
    v_name text;
    v_count bigint;
    v_rounds integer := 0;
    c_past constant integer := 24;  -- past ranges made a call and table, at most
    c_span constant integer := 1000;  -- how many intervals back a fallen row gets a partition
    v_past boolean;
    v_made integer;
    v_backlog boolean := false;
    v_created text[] := ARRAY[]::text[];
    v_dropped text[] := ARRAY[]::text[];
    v_moved bigint := 0;
    v_kept bigint := 0;
    v_gone bigint := 0;
    v_doomed bigint;
    v_ahead bigint;
    v_state text;
    v_error text;
BEGIN
    IF p_interval IS NULL OR p_interval < interval '1 minute' OR p_interval > interval '744 hours'  -- 31 days
    THEN
        RAISE EXCEPTION 'partition interval must be 1 minute to 31 days, got %', p_interval
            USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_partitioned_table
                   WHERE partrelid = ANY (ARRAY['occurrence'::regclass, 'run'::regclass])) THEN
        RETURN jsonb_build_object('partitioned', false);  -- history not partitioned: nothing
    END IF;
    IF NOT pg_try_advisory_xact_lock(c_lock) THEN
        RETURN jsonb_build_object('busy', true);
    END IF;
    v_step := extract(epoch FROM p_interval);
    v_until := v_now + greatest(coalesce(p_ahead, interval '0'), 3 * p_interval,
                                interval '1 hour');
    v_cutoff := v_now - least(p_retention, interval '36525 days');
    BEGIN
        -- (b) drop, occurrence first: a run is kept while its occurrence exists.
        FOREACH v_parent IN ARRAY ARRAY['occurrence', 'run'] LOOP
            SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO v_cols
            FROM pg_attribute
            WHERE attrelid = v_parent::regclass AND attnum > 0 AND NOT attisdropped
              AND attgenerated = '';
            FOR v_part IN
                SELECT c.relname AS name, b[1]::timestamptz AS lo, b[2]::timestamptz AS hi
                FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
                     regexp_match(pg_get_expr(c.relpartbound, c.oid), c_bounds) b
                WHERE i.inhparent = v_parent::regclass AND v_cutoff IS NOT NULL
                  AND b[2]::timestamptz <= v_cutoff
                ORDER BY 2
            LOOP
                EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', v_parent, v_part.name);
                IF v_parent = 'occurrence' THEN
                    EXECUTE format($q$
                        WITH doomed AS MATERIALIZED (
                            SELECT o.id, o.task_id, o.trigger, o.scheduled_for,
                                coalesce(o.last_scheduled_for, o.scheduled_for) AS last
                            FROM %1$I o JOIN task t ON t.id = o.task_id
                            WHERE o.finished_at < $1 - CASE
                                  WHEN coalesce(t.history_retention, $2) > interval '36525 days'
                                  THEN interval '36525 days'
                                  ELSE coalesce(t.history_retention, $2) END
                              AND (t.deleted_at IS NOT NULL
                                   OR EXISTS (SELECT 1 FROM %1$I n
                                       WHERE n.task_id = o.task_id
                                         AND n.occurrence_seq > o.occurrence_seq
                                         AND n.status <> 'skipped')
                                   OR EXISTS (SELECT 1 FROM occurrence n
                                       WHERE n.task_id = o.task_id
                                         AND n.occurrence_seq > o.occurrence_seq
                                         AND n.finished_at >= $3
                                         AND n.status <> 'skipped'))
                              AND NOT EXISTS (SELECT 1 FROM run r
                                  WHERE r.occurrence_id = o.id AND r.finished_at IS NULL)
                        ), kept AS (
                            INSERT INTO occurrence (%2$s) OVERRIDING SYSTEM VALUE
                            SELECT %2$s FROM %1$I k
                            WHERE NOT EXISTS (SELECT 1 FROM doomed d WHERE d.id = k.id)
                            RETURNING 1
                        ), marked AS (
                            INSERT INTO task_pruned AS p (task_id, pruned_through, updated_at)
                            SELECT task_id, max(last), $1 FROM doomed
                            WHERE trigger = 'schedule'
                            GROUP BY task_id
                            ORDER BY task_id
                            ON CONFLICT (task_id) DO UPDATE
                                SET pruned_through = greatest(p.pruned_through,
                                                              excluded.pruned_through),
                                    updated_at = excluded.updated_at
                        ), keys AS (
                            DELETE FROM firing_key f USING doomed d
                            WHERE f.task_id = d.task_id AND f.trigger = d.trigger
                              AND f.scheduled_for = d.scheduled_for
                        ), outbox AS (
                            DELETE FROM notification_outbox b USING doomed d
                            WHERE b.occurrence_id = d.id AND b.delivered_at IS NOT NULL
                        )
                        SELECT (SELECT count(*) FROM kept), (SELECT count(*) FROM doomed)
                        $q$, v_part.name, v_cols)
                    INTO v_count, v_doomed USING v_now, p_retention, v_part.lo;
                    v_gone := v_gone + v_doomed;
                ELSE
                    -- The runs whose occurrence still exists (kept, active, or in a partition
                    -- not dropped): their ids fall in the partition's id range, read by range
                    -- from each partition's (id) index, not probed row by row.
                    EXECUTE format($q$
                        WITH span AS (
                            SELECT min(occurrence_id) AS lo, max(occurrence_id) AS hi FROM %1$I
                        ), kept AS (
                            INSERT INTO run (%2$s) OVERRIDING SYSTEM VALUE
                            SELECT %2$s FROM %1$I k
                            WHERE k.occurrence_id IN (
                                SELECT o.id FROM occurrence o, span
                                WHERE o.id BETWEEN span.lo AND span.hi)
                            RETURNING 1
                        )
                        SELECT count(*) FROM kept
                        $q$, v_part.name, v_cols)
                    INTO v_count;
                END IF;
                v_kept := v_kept + v_count;
                EXECUTE format('DROP TABLE %I', v_part.name);
                v_dropped := v_dropped || v_part.name;
            END LOOP;
        END LOOP;

        -- (a) create: now() .. v_until first, then the ranges of rows fallen into the DEFAULT
        -- partition, oldest first, at most c_past a call and table (a large backlog, e.g. the
        -- history the path from 0037 carried, is moved over several calls), from the retention
        -- cutoff but no further back than c_span intervals (older ones are the row-by-row
        -- prune's, or stay in the DEFAULT partition when nothing is pruned).
        FOREACH v_parent IN ARRAY ARRAY['occurrence', 'run'] LOOP
            SELECT partdefid::regclass INTO v_default
            FROM pg_partitioned_table WHERE partrelid = v_parent::regclass;
            SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO v_cols
            FROM pg_attribute
            WHERE attrelid = v_parent::regclass AND attnum > 0 AND NOT attisdropped
              AND attgenerated = '';
            v_past := false;
            v_made := 0;
            v_t := v_now;
            LOOP
                v_rounds := v_rounds + 1;
                IF v_rounds > 10000 THEN
                    RAISE EXCEPTION 'partition upkeep: more than 10,000 ranges in one call'
                        USING ERRCODE = '54000';
                END IF;
                IF NOT v_past THEN
                    IF v_t >= v_until THEN
                        v_past := true;
                        v_t := greatest(coalesce(v_cutoff, '-infinity'),
                                        v_now - c_span * p_interval);
                        CONTINUE;
                    END IF;
                    v_next := v_t;
                ELSE
                    IF v_made >= c_past THEN
                        v_backlog := true;
                        EXIT;
                    END IF;
                    EXECUTE format('SELECT min(finished_at) FROM %s '
                                   'WHERE finished_at >= $1 AND finished_at < $2', v_default)
                        INTO v_next USING v_t, v_now;
                    EXIT WHEN v_next IS NULL;
                END IF;
                -- the partition covering v_next, if any: go on from its upper bound
                SELECT b[2]::timestamptz INTO v_hi
                FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
                     regexp_match(pg_get_expr(c.relpartbound, c.oid), c_bounds) b
                WHERE i.inhparent = v_parent::regclass
                  AND b[1]::timestamptz <= v_next AND v_next < b[2]::timestamptz;
                IF FOUND THEN
                    v_t := v_hi;
                    CONTINUE;
                END IF;
                -- its aligned range, clipped by the neighbours made with another interval
                v_lo := to_timestamp(floor(extract(epoch FROM v_next) / v_step) * v_step);
                v_hi := v_lo + p_interval;
                SELECT greatest(v_lo, max(b[2]::timestamptz) FILTER (
                           WHERE b[2]::timestamptz <= v_next)),
                       least(v_hi, min(b[1]::timestamptz) FILTER (
                           WHERE b[1]::timestamptz > v_next))
                INTO v_lo, v_hi
                FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
                     regexp_match(pg_get_expr(c.relpartbound, c.oid), c_bounds) b
                WHERE i.inhparent = v_parent::regclass;
                v_name := v_parent || '_p' || to_char(v_lo, 'YYYYMMDDHH24MI');
                EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS '
                               'INCLUDING CONSTRAINTS INCLUDING STORAGE, '
                               'CONSTRAINT %I CHECK (finished_at IS NOT NULL '
                               'AND finished_at >= %L AND finished_at < %L))',
                               v_name, v_parent, v_name || '_bounds', v_lo, v_hi);
                EXECUTE format('WITH moved AS (DELETE FROM %s WHERE finished_at >= $1 '
                               'AND finished_at < $2 RETURNING %s) '
                               'INSERT INTO %I (%s) SELECT %s FROM moved',
                               v_default, v_cols, v_name, v_cols, v_cols)
                    USING v_lo, v_hi;
                GET DIAGNOSTICS v_count = ROW_COUNT;
                v_moved := v_moved + v_count;
                EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                               v_parent, v_name, v_lo, v_hi);
                v_created := v_created || v_name;
                v_made := v_made + CASE WHEN v_past THEN 1 ELSE 0 END;
                v_t := v_hi;
            END LOOP;
        END LOOP;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_error = MESSAGE_TEXT;
        INSERT INTO partition_upkeep AS u (singleton, last_error, last_error_at, last_sqlstate)
        VALUES (true, v_error, v_now, v_state)
        ON CONFLICT (singleton) DO UPDATE SET last_error = excluded.last_error,
            last_error_at = excluded.last_error_at, last_sqlstate = excluded.last_sqlstate;
        RETURN jsonb_build_object('error', v_error, 'sqlstate', v_state);
    END;
    -- partitions ahead: dated partitions not yet past (the one written now included), the
    -- fewer of the two tables'
    SELECT min(n) INTO v_ahead FROM (
        SELECT count(b) AS n
        FROM unnest(ARRAY['occurrence', 'run']) AS t(parent)
        LEFT JOIN pg_inherits i ON i.inhparent = t.parent::regclass
        LEFT JOIN pg_class c ON c.oid = i.inhrelid
        LEFT JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), c_bounds) b
            ON b[2]::timestamptz > v_now
        GROUP BY t.parent) per_table;
    INSERT INTO partition_upkeep AS u (singleton, last_success_at, partitions_ahead)
    VALUES (true, v_now, v_ahead)
    ON CONFLICT (singleton) DO UPDATE SET last_success_at = excluded.last_success_at,
        partitions_ahead = excluded.partitions_ahead;
    RETURN jsonb_build_object(
        'created', to_jsonb(v_created), 'dropped', to_jsonb(v_dropped),
        'moved_rows', v_moved, 'kept_rows', v_kept, 'dropped_rows', v_gone,
        'backlog', v_backlog, 'partitions_ahead', v_ahead);
END
$function$;

DO $do$
BEGIN
    EXECUTE format('ALTER FUNCTION sd_partitions_v1(interval, interval, interval) '
                   'SET search_path = %I, pg_temp', current_schema());
END
$do$;

REVOKE EXECUTE ON FUNCTION sd_partitions_v1(interval, interval, interval) FROM PUBLIC;

DO $do$
DECLARE r record;
BEGIN
    FOR r IN SELECT rolname FROM pg_roles
             WHERE rolname NOT LIKE 'pg\_%' AND has_table_privilege(oid, 'instance', 'INSERT')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION '
                       'sd_partitions_v1(interval, interval, interval) TO %I', r.rolname);
    END LOOP;
END
$do$;
