-- 0007_heldout: the daemon's held-out loss of each theta (issue 7 item 4).
--
-- heldout_losses: one row per (run, w): the loss of theta(w), the start weights of round w
--             (w = 0: the genesis init_params; w >= 1: the theta made by merging round w - 1,
--             which exists even when round w is never opened). theta_hash is TH(theta(w)); loss
--             is the mean token cross-entropy (float64) over the first n_samples samples of the
--             operator's private holdout split; computed_round is D at the write. Write-once.

CREATE TABLE heldout_losses (
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    w INTEGER NOT NULL,
    theta_hash TEXT NOT NULL,
    loss REAL NOT NULL,
    n_samples INTEGER NOT NULL,
    computed_round INTEGER NOT NULL,
    PRIMARY KEY (run_id, w)
);
