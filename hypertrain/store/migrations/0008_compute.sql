-- 0008_compute: the coordinator's compute-job book (hypertrain/compute; issue 8 item 1).
--
-- compute_nodes:   one row per node key (a node is an account: handle, credits). key_hash is
--                  sha256 hex of the key (the key itself is never stored); capabilities is a
--                  sorted JSON array of challenge ids, replaced by every register and lease;
--                  hardware the normalised hardware class; disabled_until_ms > now means the
--                  node gets no leases (3 strikes in one UTC day, until the next UTC midnight).
--                  credits and compute_credits move together, once per paid copy.
-- compute_jobs:    one row per scoring step (challenge, subject, step); subject is canonical JSON
--                  (e.g. {"hotkey":..,"run_id":..,"w":..}); inputs a JSON array of
--                  {name, sha256, size}. wait_deadline_ms: from this instant no copy of the job
--                  is leased and a still-queued copy sends it to the fallback (timing: unscored).
--                  state: queued -> settled | fallback -> settled; queued -> unscored.
--                  result is the settled canonical answer; expiries counts expired leases.
-- compute_copies:  the copies of a job; a copy is bound to the node that leased it and to a lease
--                  token (token_hash). A node holds at most one copy of a job, ever (unique
--                  index). answer_order numbers the counted answers of a job; response is the
--                  JSON answered to the first post, replayed to an identical repeat.
-- compute_strikes: one strike per struck copy, on the UTC day (YYYY-MM-DD) it was given.
-- compute_credits: one payout per paid copy (copy_id primary key: credit exactly once).

CREATE TABLE compute_nodes (
    node_id TEXT PRIMARY KEY,
    key_hash TEXT NOT NULL UNIQUE,
    handle TEXT NOT NULL UNIQUE COLLATE NOCASE,
    capabilities TEXT NOT NULL,
    hardware TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    last_seen_ms INTEGER NOT NULL,
    jobs_done INTEGER NOT NULL DEFAULT 0,
    credits INTEGER NOT NULL DEFAULT 0,
    compute_credits INTEGER NOT NULL DEFAULT 0,
    disabled_until_ms INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE compute_jobs (
    job_id TEXT PRIMARY KEY,
    challenge TEXT NOT NULL,
    version INTEGER NOT NULL,
    subject TEXT NOT NULL,
    step TEXT NOT NULL CHECK (step IN ('public', 'hidden')),
    inputs TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    wait_ms INTEGER NOT NULL,
    wait_deadline_ms INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'queued'
        CHECK (state IN ('queued', 'settled', 'fallback', 'unscored')),
    settled_how TEXT CHECK (settled_how IN ('agreement', 'third-copy', 'fallback')),
    reason TEXT,
    result TEXT,
    settled_ms INTEGER,
    expiries INTEGER NOT NULL DEFAULT 0,
    UNIQUE (subject, step, challenge)
);

CREATE INDEX compute_jobs_by_state ON compute_jobs (state, wait_deadline_ms);
CREATE INDEX compute_jobs_by_settled ON compute_jobs (settled_ms);

CREATE TABLE compute_copies (
    copy_id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL REFERENCES compute_jobs (job_id),
    seq INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'queued' CHECK (
        state IN ('queued', 'leased', 'answered', 'released', 'expired', 'cancelled', 'late')
    ),
    queued_ms INTEGER NOT NULL,
    node_id TEXT REFERENCES compute_nodes (node_id),
    token_hash TEXT,
    leased_ms INTEGER,
    deadline_ms INTEGER,
    answer TEXT,
    answer_key TEXT,
    answered_ms INTEGER,
    answer_order INTEGER,
    response TEXT,
    verdict TEXT CHECK (verdict IN ('paid', 'struck', 'none')),
    UNIQUE (job_id, seq)
);

CREATE UNIQUE INDEX compute_copies_one_per_node ON compute_copies (job_id, node_id)
    WHERE node_id IS NOT NULL;
CREATE INDEX compute_copies_by_state ON compute_copies (state, queued_ms);
CREATE INDEX compute_copies_by_deadline ON compute_copies (deadline_ms) WHERE state = 'leased';

CREATE TABLE compute_strikes (
    copy_id TEXT PRIMARY KEY REFERENCES compute_copies (copy_id),
    node_id TEXT NOT NULL REFERENCES compute_nodes (node_id),
    day TEXT NOT NULL,
    struck_ms INTEGER NOT NULL
);

CREATE INDEX compute_strikes_by_day ON compute_strikes (node_id, day);

CREATE TABLE compute_credits (
    copy_id TEXT PRIMARY KEY REFERENCES compute_copies (copy_id),
    node_id TEXT NOT NULL REFERENCES compute_nodes (node_id),
    job_id TEXT NOT NULL REFERENCES compute_jobs (job_id),
    amount INTEGER NOT NULL,
    paid_ms INTEGER NOT NULL
);
