"""Tests of hypertrain.ledger: the spec 8 arithmetic, the rules, the journal and the CLI."""
