, latest AS (
    UPDATE task_latest l SET occurrence_seq = h.occurrence_seq, occurrence_id = h.id,
        status = h.status, finished_at = h.finished_at, error = h.error
    FROM hist h WHERE l.task_id = h.task_id AND l.occurrence_seq < h.occurrence_seq
)
