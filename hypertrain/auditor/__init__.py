"""The auditor (``hypertrain-auditor``): lease audit jobs, replay, sign verdicts (spec 6.3)."""
