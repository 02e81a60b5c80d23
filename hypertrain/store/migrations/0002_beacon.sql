-- 0002_beacon: the drand rounds this state directory has ingested (spec section 4.2).
--
-- beacon: one row per verified round, written once and never changed: a different signature for
--         a stored round is refused (409), never overwritten. D, the latest round, is
--         max(round). received_at is the unix time (seconds) the round was first stored.

CREATE TABLE beacon (
    round       INTEGER PRIMARY KEY CHECK (round >= 1),
    signature   TEXT NOT NULL
                CHECK (length(signature) = 96 AND signature NOT GLOB '*[^0-9a-f]*'),
    randomness  TEXT NOT NULL
                CHECK (length(randomness) = 64 AND randomness NOT GLOB '*[^0-9a-f]*'),
    received_at INTEGER NOT NULL
);
