-- 0015_checkpoints: the checkpoints the daemon publishes (spec 7 "Checkpoints"; issue 16;
-- the schedule is hypertrain/rounds/checkpoints.py, the writer coordinator/services/checkpoints.py).
--
-- checkpoints:        one per (run, w): the checkpoint over rounds 0..w, its status
--                     ('provisional' while a round in range is not final, 'final' after), TH of
--                     its model, the store keys of its three files (manifest_key: MANIFEST.json,
--                     lineage_key: lineage.json, model_key: model.safetensors), the applied tapes
--                     it was built from (tapes: JSON list of tape keys, rounds 0..w in order; a
--                     rollback of a round in range changes them and the row is rewritten) and
--                     written_round (D at the write). A final row never changes.
-- checkpoint_objects: every store object a replay of a run's checkpoints reads (each tape's
--                     prev_state, out_state and input deltas), with w the first checkpoint that
--                     named it; GET .../checkpoints/{w}/objects/{sha256} serves exactly the
--                     objects with w <= the checkpoint's (a later checkpoint covers an earlier
--                     one's rounds).

CREATE TABLE checkpoints (
    run_id        TEXT NOT NULL REFERENCES runs (run_id),
    w             INTEGER NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('provisional', 'final')),
    theta_hash    TEXT NOT NULL,
    manifest_key  TEXT NOT NULL,
    lineage_key   TEXT NOT NULL,
    model_key     TEXT NOT NULL,
    tapes         TEXT NOT NULL,
    written_round INTEGER NOT NULL,
    PRIMARY KEY (run_id, w)
);

CREATE TABLE checkpoint_objects (
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    sha256 TEXT NOT NULL,
    w      INTEGER NOT NULL,
    PRIMARY KEY (run_id, sha256)
) WITHOUT ROWID;
