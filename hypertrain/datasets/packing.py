"""Packing a token stream into samples, and the train/holdout split.

Packing (spec/protocol.md section 10.1, with u16 ids): the documents are concatenated, each
followed by one EOS (257); no BOS, no padding, no document-boundary masking. The stream is cut
into **non-overlapping** samples of ``seq_len + 1`` tokens: sample ``k`` is
``stream[k*(seq_len+1) : (k+1)*(seq_len+1)]`` (the trainer reads inputs ``[:-1]`` and targets
``[1:]``, so the token pair across two samples is never a training pair; this is the spec's
choice and keeps every token in exactly one sample). The trailing partial sample is dropped.

Split: of the ``N`` packed samples the **last** ``h = ceil(holdout_frac * N)`` (at least 1) form
the holdout, kept whole. A contiguous tail is used rather than every k-th sample because adjacent
samples usually come from the same document: a tail shares at most the document straddling the
cut with the train set, where an interleaved split would leak most documents into both. The train
set is the first ``floor((N - h) / samples_per_shard) * samples_per_shard`` samples (every train
shard is full); the ``dropped_tail_samples`` between train and holdout are unused, which also
widens the gap between the two sets. ``holdout_frac`` is read as the decimal it is written as
(``0.1`` is exactly 1/10), so the counts do not depend on binary float rounding.
"""

from __future__ import annotations

import math
from fractions import Fraction

import attrs
import numpy as np

from hypertrain.datasets.errors import DatasetError
from hypertrain.datasets.tokenizer import Tokens

__all__ = ["Split", "holdout_count", "pack", "split"]


def pack(stream: Tokens, seq_len: int) -> Tokens:
    """The samples of ``stream``: shape ``(len(stream) // (seq_len+1), seq_len+1)``, uint16.

    A view when possible (a C-contiguous stream gives a view of its leading part).
    """
    if seq_len < 1:
        raise DatasetError(f"seq_len must be >= 1, got {seq_len}")
    width = seq_len + 1
    n = len(stream) // width
    return np.ascontiguousarray(stream[: n * width], dtype=np.uint16).reshape(n, width)


def holdout_count(n_samples: int, holdout_frac: float) -> int:
    """``ceil(holdout_frac * n_samples)`` with ``holdout_frac`` taken as its decimal value."""
    if not 0 < holdout_frac < 1:
        raise DatasetError(f"holdout fraction must be in (0, 1), got {holdout_frac}")
    return math.ceil(Fraction(repr(holdout_frac)) * n_samples)


@attrs.frozen(eq=False)
class Split:
    """Train samples (a whole number of shards), holdout samples and the count dropped between."""

    train: Tokens
    holdout: Tokens
    dropped_tail_samples: int


def split(samples: Tokens, *, holdout_frac: float, samples_per_shard: int) -> Split:
    """Split packed ``samples`` as the module docstring says; DatasetError when too few."""
    if samples_per_shard < 1:
        raise DatasetError(f"samples per shard must be >= 1, got {samples_per_shard}")
    n = len(samples)
    h = holdout_count(n, holdout_frac)
    n_train = (n - h) // samples_per_shard * samples_per_shard if n > h else 0
    if n_train == 0:
        raise DatasetError(
            f"corpus too small: {n} packed samples leave {max(n - h, 0)} for training after "
            f"{h} holdout samples, fewer than one shard of {samples_per_shard} "
            "(add text, or lower --seq-len, --samples-per-shard or --holdout-frac)"
        )
    return Split(
        train=samples[:n_train],
        holdout=samples[n - h :],
        dropped_tail_samples=n - h - n_train,
    )
