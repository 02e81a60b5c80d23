-- 0010_scoring_outbox: a miner's delta_hash as a column, and the scoring outbox (issue 12, 5).
--
-- miners (new column): delta_hash, the posted DeltaManifest's delta_hash (the delta object's
--             sha256), written with the manifest; NULL until UPLOADED. Rows uploaded before
--             this migration get it from their stored envelope.
-- scoring_outbox: one row per recorded DeltaManifest whose scoring steps are not enqueued yet,
--             written in the transaction that records the manifest; the scoring feed enqueues
--             the steps and deletes the row in one transaction. queued_round is D when the
--             row was written. Uploads recorded before this migration that have no delta-loss
--             job yet are queued here, so an upgraded daemon still scores them.

ALTER TABLE miners ADD COLUMN delta_hash TEXT
    CHECK (delta_hash IS NULL OR (length(delta_hash) = 64 AND delta_hash NOT GLOB '*[^0-9a-f]*'));

UPDATE miners SET delta_hash = json_extract(delta_manifest, '$.body.delta_hash')
    WHERE delta_manifest IS NOT NULL;

CREATE TABLE scoring_outbox (
    run_id       TEXT NOT NULL,
    w            INTEGER NOT NULL,
    hotkey       TEXT NOT NULL,
    delta_hash   TEXT NOT NULL CHECK (length(delta_hash) = 64),
    queued_round INTEGER NOT NULL,
    PRIMARY KEY (run_id, w, hotkey),
    FOREIGN KEY (run_id, w, hotkey) REFERENCES miners (run_id, w, hotkey)
) WITHOUT ROWID;

INSERT INTO scoring_outbox (run_id, w, hotkey, delta_hash, queued_round)
    SELECT m.run_id, m.w, m.hotkey, m.delta_hash,
           (SELECT coalesce(max(round), 0) FROM beacon)
    FROM miners m
    WHERE m.status = 'UPLOADED' AND m.delta_hash IS NOT NULL
      AND NOT EXISTS (
          SELECT 1 FROM compute_jobs j
          WHERE j.challenge = 'delta-loss'
            AND json_extract(j.subject, '$.run_id') = m.run_id
            AND json_extract(j.subject, '$.w') = m.w
            AND json_extract(j.subject, '$.hotkey') = m.hotkey
      );
