"""The drand beacon: hypertrain's only clock and its source of unbiasable randomness."""
