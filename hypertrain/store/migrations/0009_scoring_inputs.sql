-- 0009_scoring_inputs: what the daemon feeds to the compute network (issue 8).
--
-- scoring_inputs: per run, the objects every delta-loss job of that run shares, built once:
--                 'model' (the manifest's model section as JSON), 'public' (the public trace:
--                 the first trace_samples samples of the train split) and 'hidden' (the first
--                 trace_samples holdout samples, from the operator's private holdout).
-- private_objects: objects the object route serves to the admin only (hidden traces); nodes
--                 get them through GET /v1/compute/jobs/{id}/inputs/{name} with a lease.

CREATE TABLE scoring_inputs (
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    kind   TEXT NOT NULL CHECK (kind IN ('model', 'public', 'hidden')),
    sha256 TEXT NOT NULL CHECK (length(sha256) = 64),
    size   INTEGER NOT NULL CHECK (size >= 0),
    PRIMARY KEY (run_id, kind)
) WITHOUT ROWID;

CREATE TABLE private_objects (
    sha256 TEXT PRIMARY KEY NOT NULL CHECK (length(sha256) = 64),
    reason TEXT NOT NULL
) WITHOUT ROWID;
