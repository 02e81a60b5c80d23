-- 0021_hidden_slices: hidden-trace shards per node and their rotation (issue 19 items 4, 5).
--
-- hidden_windows:       one row per hidden window of a run: the holdout samples the hidden
--                       steps of rounds [epoch * R, (epoch + 1) * R) are scored on (R:
--                       HYPERTRAIN_HIDDEN_ROTATE_ROUNDS). window is the sha256 of the whole
--                       window's trace (a private object, never sent to a node); slices the JSON
--                       array of its slices' {name, sha256, size} in slice order (each a private
--                       object). retired_ms is set when a later window replaced it: its
--                       unsettled slice jobs ended unscored and no new step uses it.
-- hidden_slice_jobs:    the compute job of slice `slice` (of `slices`) of the hidden step whose
--                       canonical subject is step_subject, on `window`.
-- hidden_slice_holders: the one slice of a window a node may ever hold, written by the lease
--                       transaction that first gives it a copy of that window: a node never
--                       gets a copy of another slice of the same window, and the input route
--                       refuses it another slice's trace.

CREATE TABLE hidden_windows (
    window TEXT PRIMARY KEY NOT NULL CHECK (length(window) = 64),
    run_id TEXT NOT NULL,
    epoch INTEGER NOT NULL CHECK (epoch >= 0),
    first_sample INTEGER NOT NULL CHECK (first_sample >= 0),
    rows INTEGER NOT NULL CHECK (rows > 0),
    slices TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    retired_ms INTEGER,
    UNIQUE (run_id, epoch)
) WITHOUT ROWID;

CREATE TABLE hidden_slice_jobs (
    job_id TEXT PRIMARY KEY NOT NULL REFERENCES compute_jobs (job_id),
    step_subject TEXT NOT NULL,
    window TEXT NOT NULL REFERENCES hidden_windows (window),
    slice INTEGER NOT NULL CHECK (slice >= 0),
    slices INTEGER NOT NULL CHECK (slices > slice),
    step_id TEXT NOT NULL,
    UNIQUE (step_subject, window, slice)
) WITHOUT ROWID;

CREATE INDEX hidden_slice_jobs_by_window ON hidden_slice_jobs (window);
CREATE INDEX hidden_slice_jobs_by_step_id ON hidden_slice_jobs (step_id);

CREATE TABLE hidden_slice_holders (
    window TEXT NOT NULL REFERENCES hidden_windows (window),
    node_id TEXT NOT NULL REFERENCES compute_nodes (node_id),
    slice INTEGER NOT NULL CHECK (slice >= 0),
    bound_ms INTEGER NOT NULL,
    PRIMARY KEY (window, node_id)
) WITHOUT ROWID;
