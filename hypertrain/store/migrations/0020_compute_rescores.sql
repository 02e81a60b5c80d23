-- 0020_compute_rescores: sampled trusted re-scores of steps the nodes settled by agreement
-- (issue 19 item 3; hypertrain/compute/rescores.py).
--
-- compute_rescores: one row per step settled by agreement while HYPERTRAIN_COMPUTE_AUDIT_PERMILLE
--                  was above 0 (job_id primary key: a step is entered once and drawn at most
--                  once). draw_round is NULL until the beacon observer that first runs after the
--                  settlement fixes it (the first round after both the latest stored round and
--                  the round the wall clock made due then); the row is then decided by the
--                  randomness of the first stored round >= draw_round (beacon_round), with
--                  permille the rate in force: state waiting -> skipped | drawn; a drawn step is
--                  re-scored by the fallback pool: drawn -> agreed | replaced | inconclusive.
--                  trusted is the re-score's canonical answer; replaced the node-agreed result
--                  it overturned; consumed names what had already used that result (a round
--                  already final), which is reported, never rewritten.
-- compute_clawbacks: one row per paid copy whose credit a disagreeing re-score took back
--                  (copy_id primary key: once). paid is what the copy earned; clawed what was
--                  taken, never more than the node's credits then (paid - clawed is a shortfall
--                  recorded here, never a negative balance).

CREATE TABLE compute_rescores (
    job_id TEXT PRIMARY KEY REFERENCES compute_jobs (job_id),
    settled_ms INTEGER NOT NULL,
    draw_round INTEGER,
    beacon_round INTEGER,
    permille INTEGER,
    state TEXT NOT NULL DEFAULT 'waiting' CHECK (
        state IN ('waiting', 'skipped', 'drawn', 'agreed', 'replaced', 'inconclusive')
    ),
    decided_ms INTEGER,
    rescored_ms INTEGER,
    trusted TEXT,
    replaced TEXT,
    consumed TEXT
);

CREATE INDEX compute_rescores_unfixed ON compute_rescores (settled_ms)
    WHERE draw_round IS NULL;
CREATE INDEX compute_rescores_due ON compute_rescores (draw_round)
    WHERE state = 'waiting' AND draw_round IS NOT NULL;
CREATE INDEX compute_rescores_drawn ON compute_rescores (decided_ms) WHERE state = 'drawn';

CREATE TABLE compute_clawbacks (
    copy_id TEXT PRIMARY KEY REFERENCES compute_copies (copy_id),
    node_id TEXT NOT NULL REFERENCES compute_nodes (node_id),
    job_id TEXT NOT NULL REFERENCES compute_jobs (job_id),
    paid INTEGER NOT NULL,
    clawed INTEGER NOT NULL CHECK (clawed >= 0 AND clawed <= paid),
    clawed_ms INTEGER NOT NULL
);
