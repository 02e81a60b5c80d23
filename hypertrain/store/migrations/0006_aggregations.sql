-- 0006_aggregations: the daemon's aggregation of a round (spec sections 7 and 9, issue 7).
--
-- aggregations: one row per (run, w) merged by the daemon's aggregator, written in the same
--             transaction that opens round w + 1: the signed tape's object key (tape_key), the
--             stored OuterState blob (out_state, pack_outer), the theta-only start-state blob of
--             round w + 1 (theta_start_sha256), TH(theta'), the merged update's norm
--             (update_norm, float64) and how many deltas were preclipped (clipped); applied_round
--             is D at the write. Rounds opened through POST .../aggregate have no row.

CREATE TABLE aggregations (
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    w INTEGER NOT NULL,
    tape_key TEXT NOT NULL,
    out_state TEXT NOT NULL,
    theta_start_sha256 TEXT NOT NULL,
    theta_hash TEXT NOT NULL,
    update_norm REAL NOT NULL,
    clipped INTEGER NOT NULL,
    applied_round INTEGER NOT NULL,
    PRIMARY KEY (run_id, w)
);
