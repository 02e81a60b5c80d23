"""Deterministic model, optimizer, inner loop, leaves and delta codecs (spec section 5)."""
