-- 0011_audits: the audit draw, audit jobs, served states and forfeits (spec 6.2-6.3, 9, 9.1).
--
-- audit_draws: one row per (run, w) once the audit draw ran (D >= d_audit, drand[d_audit]
--             stored and, in segments mode, every picked miner's preimages stored or D >=
--             d_upload): selected is the JSON array of selected hotkeys (sorted), drawn_round D.
-- audit_jobs: one row per selected miner: the K_coord-sealed AuditChallenge (canonical JSON
--             envelope), its challenge_hash (body_digest of the body), mode, serve_deadline;
--             state queued -> leased -> done (a verdict) or failed (fail without retry); a
--             lease token (32 hex) and lease_expires_round while leased; attempts counts
--             leases; the accepted ReplayVerdict envelope, its result and signer (auditor).
--             Jobs are handed out ORDER BY w, rowid.
-- state_serves: the StateServes a target posted for a challenge, one per (challenge, t): the
--             envelope and the served blob's sha256.
-- forfeits:   the K_coord-sealed provisional Forfeit of a faulted miner, one per (run, w,
--             hotkey), with its cause.

CREATE TABLE audit_draws (
    run_id      TEXT NOT NULL,
    w           INTEGER NOT NULL,
    selected    TEXT NOT NULL,
    drawn_round INTEGER NOT NULL,
    PRIMARY KEY (run_id, w),
    FOREIGN KEY (run_id, w) REFERENCES rounds (run_id, w)
) WITHOUT ROWID;

CREATE TABLE audit_jobs (
    job_id              TEXT PRIMARY KEY NOT NULL,
    run_id              TEXT NOT NULL,
    w                   INTEGER NOT NULL,
    target              TEXT NOT NULL,
    challenge           TEXT NOT NULL,
    challenge_hash      TEXT NOT NULL UNIQUE CHECK (length(challenge_hash) = 64),
    mode                TEXT NOT NULL CHECK (mode IN ('full', 'segments')),
    serve_deadline      INTEGER NOT NULL,
    state               TEXT NOT NULL DEFAULT 'queued'
                        CHECK (state IN ('queued', 'leased', 'done', 'failed')),
    lease               TEXT CHECK (lease IS NULL OR length(lease) = 32),
    lease_expires_round INTEGER,
    attempts            INTEGER NOT NULL DEFAULT 0,
    fail_reason         TEXT,
    verdict             TEXT,
    result              TEXT,
    auditor             TEXT,
    verdict_round       INTEGER,
    created_round       INTEGER NOT NULL,
    UNIQUE (run_id, w, target),
    FOREIGN KEY (run_id, w, target) REFERENCES miners (run_id, w, hotkey)
);

CREATE INDEX audit_jobs_by_state ON audit_jobs (state, w);

CREATE TABLE state_serves (
    challenge_hash TEXT NOT NULL REFERENCES audit_jobs (challenge_hash),
    t              INTEGER NOT NULL CHECK (t >= 0),
    envelope       TEXT NOT NULL,
    blob_sha256    TEXT NOT NULL CHECK (length(blob_sha256) = 64),
    stored_round   INTEGER NOT NULL,
    PRIMARY KEY (challenge_hash, t)
) WITHOUT ROWID;

CREATE TABLE forfeits (
    run_id       TEXT NOT NULL,
    w            INTEGER NOT NULL,
    hotkey       TEXT NOT NULL,
    cause        TEXT NOT NULL,
    envelope     TEXT NOT NULL,
    sealed_round INTEGER NOT NULL,
    PRIMARY KEY (run_id, w, hotkey),
    FOREIGN KEY (run_id, w, hotkey) REFERENCES miners (run_id, w, hotkey)
) WITHOUT ROWID;
