"""Tests of hypertrain.compute: keys, answers, rules and the SQLite compute book."""
