-- 0014_finality: finalised rounds, rollbacks, and the inputs of every applied merge (spec 7, 8;
-- issue 15; the rules are hypertrain/rounds/finality.py).
--
-- finalizations: one per final round: the K_coord Finalize envelope, the ledger inputs (entries:
--                JSON list of {hotkey, verdict, tokens, soft_score_ppm} by hotkey, what
--                entitlements_root commits to), final_round (D at the write), at (the ledger event
--                time, unix seconds) and ledger_round (round_of(at) in the ledger's epochs: the
--                round state turns VESTING and RELEASED from it). ledger_synced is 1 once the
--                ledger journal holds the round's commits, verdicts and finalize.
-- rollbacks:     one per rolled-back round w (rounds w and w+1 recomputed without the excluded
--                miners): the K_coord Rollback envelope, excluded (JSON list), the tapes it
--                replaced and the new ones (JSON lists [w, w+1]), recorded_round (D).
-- ledger_outbox: a dispute of a final round decided after finality (its miner's verdict was
--                NO_UPLOAD, the dispute still open): vindicate (the miner won: its forgone slice
--                becomes escrow) or fault (it lost: escrow burns, the hotkey is frozen), for the
--                ledger feed; synced is 1 once the journal holds it.
-- aggregations.inputs: the hotkeys whose deltas the applied tape of the round merged (JSON
--                list, sorted); a rollback rewrites the row. NULL for a row written before
--                0014 (finality then refuses the round and says why).

CREATE TABLE finalizations (
    run_id        TEXT NOT NULL REFERENCES runs (run_id),
    w             INTEGER NOT NULL,
    envelope      TEXT NOT NULL,
    entries       TEXT NOT NULL,
    final_round   INTEGER NOT NULL,
    at            INTEGER NOT NULL,
    ledger_round  INTEGER NOT NULL,
    vesting_round INTEGER NOT NULL,
    released_round INTEGER NOT NULL,
    ledger_synced INTEGER NOT NULL DEFAULT 0 CHECK (ledger_synced IN (0, 1)),
    PRIMARY KEY (run_id, w)
);

CREATE INDEX finalizations_unsynced ON finalizations (ledger_synced, run_id, w);

CREATE TABLE rollbacks (
    run_id         TEXT NOT NULL REFERENCES runs (run_id),
    w              INTEGER NOT NULL,
    envelope       TEXT NOT NULL,
    excluded       TEXT NOT NULL,
    old_tapes      TEXT NOT NULL,
    new_tapes      TEXT NOT NULL,
    recorded_round INTEGER NOT NULL,
    PRIMARY KEY (run_id, w)
);

CREATE TABLE ledger_outbox (
    run_id         TEXT NOT NULL REFERENCES runs (run_id),
    w              INTEGER NOT NULL,
    hotkey         TEXT NOT NULL,
    action         TEXT NOT NULL CHECK (action IN ('vindicate', 'fault')),
    recorded_round INTEGER NOT NULL,
    synced         INTEGER NOT NULL DEFAULT 0 CHECK (synced IN (0, 1)),
    PRIMARY KEY (run_id, w, hotkey)
);

ALTER TABLE aggregations ADD COLUMN inputs TEXT;
