-- Alternative E: the hot row carries its running attempt (no run row while it runs), and the
-- completion deletes it and writes ONE history row per ended firing, its last attempt's fields
-- beside the firing's. An attempt that ends without ending its firing (a retry, a takeover, a
-- drain) writes an attempt_history row when it ends. Both partitioned by finished_at: history.sql
-- then e_history.sql, after these columns are on the hot row.
ALTER TABLE occurrence
    ADD COLUMN run_id bigint, ADD COLUMN run_uuid uuid, ADD COLUMN lease_expires_at timestamptz,
    ADD COLUMN takeover_at timestamptz, ADD COLUMN started_at timestamptz,
    ADD COLUMN build_revision text, ADD COLUMN followed_at timestamptz;
CREATE INDEX occurrence_takeover_idx ON occurrence (takeover_at) WHERE status = 'running';
CREATE SEQUENCE attempt_id_seq;
