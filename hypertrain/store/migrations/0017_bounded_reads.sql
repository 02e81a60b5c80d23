-- 0017_bounded_reads: the audit draw and the auditor stats read what is at hand, not every round
-- ever opened (issue 17 goal 6).
--
-- undrawn_rounds: the rounds still waiting for their audit draw (of runs whose manifest names
--                 an auditor; a run without auditors is never drawn), with their d_audit. The
--                 draw, run after every beacon round, read every round of every run to find
--                 them. The two triggers keep it for every writer: a round opened enters it,
--                 its audit_draws row takes it out. A run's manifest never changes, so whether
--                 its rounds enter is settled when they open (a manifest that is not JSON, as
--                 only a test writes, names no auditor).
-- audit_jobs.honeypot_commit: the honeypot commitment of the RoundOpen the job audits (set by
--                 the draw); the auditor stats read it and each round's d_audit (from the
--                 covering rounds_dates) instead of every round's RoundOpen envelope (a roster
--                 entry per miner: kilobytes a round, ~0.5 s at 10,000 rounds of 256 miners).

CREATE TABLE undrawn_rounds (
    run_id  TEXT NOT NULL,
    w       INTEGER NOT NULL,
    d_audit INTEGER NOT NULL,
    PRIMARY KEY (run_id, w),
    FOREIGN KEY (run_id, w) REFERENCES rounds (run_id, w)
) WITHOUT ROWID;

INSERT INTO undrawn_rounds (run_id, w, d_audit)
    SELECT r.run_id, r.w, r.d_audit FROM rounds r JOIN runs ON runs.run_id = r.run_id
    WHERE CASE WHEN json_valid(runs.manifest_envelope)
        THEN json_array_length(runs.manifest_envelope, '$.body.auditors') ELSE 0 END > 0
    AND NOT EXISTS (SELECT 1 FROM audit_draws d WHERE d.run_id = r.run_id AND d.w = r.w);

CREATE TRIGGER rounds_enter_undrawn AFTER INSERT ON rounds
WHEN (
    SELECT CASE WHEN json_valid(manifest_envelope)
        THEN json_array_length(manifest_envelope, '$.body.auditors') ELSE 0 END
    FROM runs WHERE run_id = NEW.run_id
) > 0
BEGIN
    INSERT INTO undrawn_rounds (run_id, w, d_audit) VALUES (NEW.run_id, NEW.w, NEW.d_audit);
END;

CREATE TRIGGER audit_draws_leave_undrawn AFTER INSERT ON audit_draws
BEGIN
    DELETE FROM undrawn_rounds WHERE run_id = NEW.run_id AND w = NEW.w;
END;

ALTER TABLE audit_jobs ADD COLUMN honeypot_commit TEXT;

UPDATE audit_jobs SET honeypot_commit = (
    SELECT json_extract(r.round_open, '$.body.honeypot_commit') FROM rounds r
    WHERE r.run_id = audit_jobs.run_id AND r.w = audit_jobs.w
);
