"""Scoring: the challenge registry, the scorers and their sandboxed worker process."""
