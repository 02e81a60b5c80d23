-- 0003_runs: the run lifecycle (spec sections 1.3, 2.3, 6.5 and 9).
--
-- runs:       one row per run (v1: at most one per state directory). manifest_envelope is the
--             owner-signed RunManifest envelope as received (canonical JSON). status is
--             'created' until the first pause/unpause, then 'running' or 'paused'; only
--             'running' is unpaused. config is the canonical JSON of the PUT .../config body
--             (NULL until configured). honeypot_commit is the commitment copied into the
--             RoundOpens opened from now on (NULL: NO_HONEYPOT).
-- roster:     admitted miners. admitted_w is the first round the miner is rostered in (the
--             next round to open when it was admitted or re-admitted); removed and blacklisted
--             miners stay as rows and are left out of the next RoundOpen's roster.
-- rounds:     one row per opened round: the K_coord-signed RoundOpen envelope, its deadlines
--             (copied out of the body for queries), base (the dataset offset of slot 0 for the
--             assignment), the audit reasons of each rostered miner (JSON object hotkey ->
--             [reasons]), the round D at which it was stored, and the last round state
--             published as an event (NULL: none yet), so that a restart resumes the feed.
-- miners:     per round, one row per rostered miner: its slot and status (ASSIGNED at open).
-- honeypots:  honeypot commitments of a run and their reveal (JSON {members, salt}, NULL until
--             revealed).
-- seen:       replay keys of accepted envelopes (spec 2.3): key is the canonical JSON array
--             [run_id, w or "-", type, signer, subject]; a key is accepted once.

CREATE TABLE runs (
    run_id            TEXT PRIMARY KEY NOT NULL
                      CHECK (length(run_id) = 64 AND run_id NOT GLOB '*[^0-9a-f]*'),
    manifest_envelope TEXT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('created', 'paused', 'running')),
    config            TEXT,
    honeypot_commit   TEXT
                      CHECK (honeypot_commit IS NULL OR (length(honeypot_commit) = 64
                             AND honeypot_commit NOT GLOB '*[^0-9a-f]*')),
    created_round     INTEGER NOT NULL CHECK (created_round >= 1),
    created_at        INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE roster (
    run_id      TEXT NOT NULL REFERENCES runs (run_id),
    hotkey      TEXT NOT NULL,
    bond        INTEGER NOT NULL CHECK (bond IN (0, 1)),
    probation   INTEGER NOT NULL CHECK (probation IN (0, 1)),
    cluster     TEXT CHECK (cluster IS NULL OR length(cluster) <= 64),
    region      TEXT CHECK (region IS NULL OR length(region) <= 64),
    flags       TEXT NOT NULL,
    admitted_w  INTEGER NOT NULL CHECK (admitted_w >= 0),
    removed     INTEGER NOT NULL DEFAULT 0 CHECK (removed IN (0, 1)),
    blacklisted INTEGER NOT NULL DEFAULT 0 CHECK (blacklisted IN (0, 1)),
    PRIMARY KEY (run_id, hotkey)
) WITHOUT ROWID;

CREATE TABLE rounds (
    run_id          TEXT NOT NULL REFERENCES runs (run_id),
    w               INTEGER NOT NULL CHECK (w >= 0),
    round_open      TEXT NOT NULL,
    d_open          INTEGER NOT NULL,
    d_assign        INTEGER NOT NULL,
    d_commit        INTEGER NOT NULL,
    d_audit         INTEGER NOT NULL,
    d_upload        INTEGER NOT NULL,
    d_final         INTEGER NOT NULL,
    base            INTEGER NOT NULL CHECK (base >= 0),
    reasons         TEXT NOT NULL,
    opened_round    INTEGER NOT NULL,
    published_state TEXT,
    PRIMARY KEY (run_id, w)
) WITHOUT ROWID;

CREATE TABLE miners (
    run_id TEXT NOT NULL,
    w      INTEGER NOT NULL,
    hotkey TEXT NOT NULL,
    slot   INTEGER NOT NULL CHECK (slot >= 0),
    status TEXT NOT NULL DEFAULT 'ASSIGNED',
    PRIMARY KEY (run_id, w, hotkey),
    FOREIGN KEY (run_id, w) REFERENCES rounds (run_id, w)
) WITHOUT ROWID;

CREATE TABLE honeypots (
    run_id         TEXT NOT NULL REFERENCES runs (run_id),
    commitment     TEXT NOT NULL
                   CHECK (length(commitment) = 64 AND commitment NOT GLOB '*[^0-9a-f]*'),
    committed_round INTEGER NOT NULL,
    reveal         TEXT,
    revealed_round INTEGER,
    PRIMARY KEY (run_id, commitment)
) WITHOUT ROWID;

CREATE TABLE seen (
    key            TEXT PRIMARY KEY NOT NULL,
    run_id         TEXT NOT NULL,
    type           TEXT NOT NULL,
    accepted_round INTEGER NOT NULL
) WITHOUT ROWID;
