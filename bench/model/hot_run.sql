-- Alternatives B and C: the running attempts (a run row leaves when its attempt ends).
CREATE TABLE run (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    occurrence_id bigint NOT NULL REFERENCES occurrence(id),
    attempt integer NOT NULL,
    owner text NOT NULL,
    lease_token bigint NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    takeover_at timestamptz NOT NULL,
    status text NOT NULL DEFAULT 'running',
    exit_code integer,
    http_status integer,
    output_tail text,
    error text,
    finished_by text,
    started_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    build_revision text,
    uuid uuid DEFAULT gen_random_uuid(),
    followed_at timestamptz
);
-- One running attempt per occurrence (today's run_occurrence_running_key); the token's
-- uniqueness per occurrence follows from the hot row's token only growing.
CREATE UNIQUE INDEX run_occurrence_key ON run (occurrence_id);
CREATE INDEX run_takeover_idx ON run (takeover_at);
CREATE INDEX run_build_running_idx ON run (build_revision);
