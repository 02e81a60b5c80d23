"""hypertrain-daemon: the operator's one binary (composition root and settings)."""
