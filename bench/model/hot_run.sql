-- Alternatives B and C: the running attempts (a run row leaves when its attempt ends).
-- Today's run table (price.py loads its CREATE TABLE); the token's uniqueness per occurrence
-- follows from the hot row's token only growing.
ALTER TABLE run DROP CONSTRAINT run_occurrence_token_key;
-- One running attempt per occurrence (today's run_occurrence_running_key).
CREATE UNIQUE INDEX run_occurrence_key ON run (occurrence_id);
CREATE INDEX run_takeover_idx ON run (takeover_at);
CREATE INDEX run_build_running_idx ON run (build_revision);
