-- 0016_view_indexes: reads of many rounds or miners never walk the envelopes stored in their
-- rows (issue 17 goal 6).
--
-- A rounds row stores its RoundOpen envelope (a roster entry per miner: kilobytes) before its
-- deadlines and published_state, so any read of those small columns walked the envelope's
-- overflow pages: the run view's page of 257 rounds took ~8 ms at 256 miners, and the round-state
-- feed's search of every round not yet RELEASED (run on every beacon round) read the whole
-- table, ~250 ms at 10,000 rounds.
--
-- rounds_dates:      the deadlines of each round, by run and w (the run view's pages, the round
--                    states of a page), covering.
-- rounds_unreleased: the rounds the round-state feed still watches (published_state not
--                    RELEASED, the last state a round reaches), covering; a query uses it only
--                    when its WHERE names the literal 'RELEASED'.
-- miners_facts:      each miner's slot, status, received_round and delta_hash, by run, w and
--                    hotkey, covering: a miners row stores its Commit, Receipt and
--                    DeltaManifest envelopes before received_round and delta_hash, so the round
--                    view's default page (no envelopes) and the uploaded miners of a round
--                    walked every envelope.

CREATE INDEX rounds_dates
    ON rounds (run_id, w, d_open, d_assign, d_commit, d_audit, d_upload, d_final);

CREATE INDEX rounds_unreleased
    ON rounds (run_id, w, published_state, d_open, d_assign, d_commit, d_audit, d_upload, d_final)
    WHERE published_state IS NOT 'RELEASED';

CREATE INDEX miners_facts
    ON miners (run_id, w, hotkey, slot, status, received_round, delta_hash);
