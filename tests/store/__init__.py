"""Tests of hypertrain.store."""
