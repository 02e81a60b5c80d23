-- 0004_miner_flow: what miners post in a round (spec sections 1.3 steps 3-6, 3, 5.5 and 9).
--
-- miners (new columns): the miner's signed messages as received, canonical JSON envelopes:
--             accept_envelope (Accept), commit_envelope (Commit), receipt (the K_coord Receipt
--             answered to the commit), delta_manifest (DeltaManifest); received_round is D when
--             the Commit arrived (>= d_audit: status EXCLUDED). NULL until posted.
-- leaves:     per (run, w, hotkey), the posted LeafPreimages (canonical JSON array, t order),
--             the leaves_root they Merkle to (equal to the commit's), the optional ef_in object
--             sha256 and the round D at which they were stored. Written once.
-- upload_grants: one row per granted upload (POST .../uploads): a random 32-hex token naming
--             the committed delta object (sha256, size = commit.delta_bytes) of one miner,
--             usable for PUT /v1/uploads/{grant} while D < expires_round (d_upload).
-- round_states: the published start state of a round (admin PUT .../rounds/{w}/state):
--             theta_start_sha256 (an object whose TH equals RoundOpen.theta_hash) and the
--             optional v0_sha256; write-once.

ALTER TABLE miners ADD COLUMN accept_envelope TEXT;
ALTER TABLE miners ADD COLUMN commit_envelope TEXT;
ALTER TABLE miners ADD COLUMN receipt TEXT;
ALTER TABLE miners ADD COLUMN received_round INTEGER;
ALTER TABLE miners ADD COLUMN delta_manifest TEXT;

CREATE TABLE leaves (
    run_id       TEXT NOT NULL,
    w            INTEGER NOT NULL,
    hotkey       TEXT NOT NULL,
    preimages    TEXT NOT NULL,
    leaves_root  TEXT NOT NULL CHECK (length(leaves_root) = 64),
    ef_in_sha256 TEXT CHECK (ef_in_sha256 IS NULL OR length(ef_in_sha256) = 64),
    stored_round INTEGER NOT NULL,
    PRIMARY KEY (run_id, w, hotkey),
    FOREIGN KEY (run_id, w, hotkey) REFERENCES miners (run_id, w, hotkey)
) WITHOUT ROWID;

CREATE TABLE upload_grants (
    grant_id      TEXT PRIMARY KEY NOT NULL
                  CHECK (length(grant_id) = 32 AND grant_id NOT GLOB '*[^0-9a-f]*'),
    run_id        TEXT NOT NULL,
    w             INTEGER NOT NULL,
    hotkey        TEXT NOT NULL,
    sha256        TEXT NOT NULL CHECK (length(sha256) = 64),
    size          INTEGER NOT NULL CHECK (size >= 0),
    expires_round INTEGER NOT NULL,
    granted_round INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE round_states (
    run_id             TEXT NOT NULL,
    w                  INTEGER NOT NULL,
    theta_start_sha256 TEXT NOT NULL CHECK (length(theta_start_sha256) = 64),
    v0_sha256          TEXT CHECK (v0_sha256 IS NULL OR length(v0_sha256) = 64),
    published_round    INTEGER NOT NULL,
    PRIMARY KEY (run_id, w),
    FOREIGN KEY (run_id, w) REFERENCES rounds (run_id, w)
) WITHOUT ROWID;
