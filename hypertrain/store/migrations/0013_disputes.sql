-- 0013_disputes: a miner's Dispute of a verdict, its bisection and its outcome (spec 6.4,
-- issue 14; the protocol is hypertrain/rounds/bisection.py).
--
-- disputes:  one per verdict (verdict_hash, the body digest of the ReplayVerdict): the miner
--            (hotkey) and the disputed auditor (the verdict's signer), the audit job, the
--            verdict's first_bad_leaf and the Dispute envelope. state is open (contested and
--            not yet decided), accepted (the miner accepted the fault) or resolved. While open,
--            stage is the bisection round waiting for Bisects (JSON of bisection.Stage) with its
--            deadline (level_deadline: dispute_per_level drand rounds after its level began),
--            or NULL once the dispute waits for its referee (referee: JSON of
--            bisection.RefereeCase). agreed_step is the state hash both parties published before
--            the step being bisected (NULL until known). outcome (JSON) names the loser, how it
--            lost (referee or timeout) and the Resolution, once resolved.
-- bisects:   every Bisect envelope accepted, in order (seq from 1 per dispute), with the stage it
--            answered and its hashes (JSON list); a party's earlier claims are read from here.

CREATE TABLE disputes (
    dispute_id     TEXT PRIMARY KEY CHECK (length(dispute_id) = 64),
    run_id         TEXT NOT NULL,
    w              INTEGER NOT NULL,
    hotkey         TEXT NOT NULL,
    auditor        TEXT NOT NULL,
    job_id         TEXT NOT NULL,
    verdict_hash   TEXT NOT NULL UNIQUE CHECK (length(verdict_hash) = 64),
    first_bad_leaf INTEGER,
    action         TEXT NOT NULL CHECK (action IN ('accept', 'contest')),
    state          TEXT NOT NULL CHECK (state IN ('open', 'accepted', 'resolved')),
    stage          TEXT,
    level_deadline INTEGER,
    referee        TEXT,
    agreed_step    TEXT,
    outcome        TEXT,
    envelope       TEXT NOT NULL,
    opened_round   INTEGER NOT NULL,
    resolved_round INTEGER,
    FOREIGN KEY (run_id, w, hotkey) REFERENCES miners (run_id, w, hotkey)
);

CREATE INDEX disputes_by_run ON disputes (run_id, w);
CREATE INDEX disputes_open ON disputes (state, level_deadline);

CREATE TABLE bisects (
    dispute_id     TEXT NOT NULL REFERENCES disputes (dispute_id),
    seq            INTEGER NOT NULL,
    party          TEXT NOT NULL,
    role           TEXT NOT NULL CHECK (role IN ('miner', 'auditor')),
    stage          TEXT NOT NULL,
    hashes         TEXT NOT NULL,
    envelope       TEXT NOT NULL,
    received_round INTEGER NOT NULL,
    PRIMARY KEY (dispute_id, seq)
) WITHOUT ROWID;
