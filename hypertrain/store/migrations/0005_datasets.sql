-- 0005_datasets: the dataset registered for a run (admin PUT /v1/admin/runs/{id}/dataset).
--
-- run_datasets: one row per run: manifest_sha256 names the pinned dataset manifest.json object
--             (its shards are objects too, each under its sha256) whose dataset_spec() equals
--             the run manifest's dataset section; registered is the unix time of the PUT.
--             Write-once.

CREATE TABLE run_datasets (
    run_id          TEXT PRIMARY KEY NOT NULL REFERENCES runs (run_id),
    manifest_sha256 TEXT NOT NULL
                    CHECK (length(manifest_sha256) = 64 AND manifest_sha256 NOT GLOB '*[^0-9a-f]*'),
    registered      INTEGER NOT NULL
) WITHOUT ROWID;
