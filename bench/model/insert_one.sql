-- fragment (price.py splices it into the life scripts): the producer's insert of one queued
-- scheduled firing of a random task, as occurrence_dispatch writes one (not_before, the
-- idempotency key's length and shape).
INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, status,
    not_before, created_at, updated_at, idempotency_key)
SELECT k.task_id, nextval('bench_seq'), k.scheduled_for, 'schedule', 'forbid', 'queued',
    k.scheduled_for, k.scheduled_for, k.scheduled_for,
    'scheduler-daemon:3f2504e0-4f89-11d3-9a0c-0305e82c3301:schedule:'
        || to_char(k.scheduled_for AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || 'Z'
FROM k
