"""hypertrain: open, verifiable training of language models across untrusting machines."""

__version__ = "0.1.0"
