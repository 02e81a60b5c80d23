-- 0012_reruns: a miner's rerun after a MISMATCH verdict (spec 6.4, issue 14 item 1).
--
-- reruns:     one per (run, w, hotkey): the rerun's leaves root (as the miner signed it), its
--             classification (TRANSIENT, CONTEST or FAULT), the ledger epoch of D when it was
--             posted (TRANSIENTs are forgiven forgive_per_epoch times per hotkey and epoch) and
--             that D.

CREATE TABLE reruns (
    run_id         TEXT NOT NULL,
    w              INTEGER NOT NULL,
    hotkey         TEXT NOT NULL,
    leaves_root    TEXT NOT NULL CHECK (length(leaves_root) = 64),
    classification TEXT NOT NULL CHECK (classification IN ('TRANSIENT', 'CONTEST', 'FAULT')),
    epoch          INTEGER NOT NULL,
    rerun_round    INTEGER NOT NULL,
    PRIMARY KEY (run_id, w, hotkey),
    FOREIGN KEY (run_id, w, hotkey) REFERENCES miners (run_id, w, hotkey)
) WITHOUT ROWID;
