"""The ht-byte-259 tokenizer, packing into samples and the train/holdout split."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypertrain.datasets import (
    BOS,
    EOS,
    PAD,
    TOKENIZER_SHA256,
    DatasetError,
    decode,
    encode,
    encode_docs,
    pack,
    split,
)
from hypertrain.datasets.packing import holdout_count
from hypertrain.datasets.tokenizer import tokenizer_json
from hypertrain.protocol.testmode import BYTE_TOKENIZER_SHA256

PIN = "ca59f3def5da209643b28ffc6956f6710eb5b7051263ce3529fd587e4f07765f"


def test_tokenizer_pin_is_the_spec_value() -> None:
    preimage = b"ht-byte-tokenizer-v1|vocab=259|bytes=0..255|bos=256|eos=257|pad=258"
    assert hashlib.sha256(preimage).hexdigest() == PIN
    assert TOKENIZER_SHA256 == PIN == BYTE_TOKENIZER_SHA256
    assert tokenizer_json() == {"name": "ht-byte-259", "sha256": PIN}
    assert (BOS, EOS, PAD) == (256, 257, 258)


def test_encode_is_utf8_bytes_with_optional_specials() -> None:
    ids = encode("aé", bos=True, eos=True)
    assert ids.dtype == np.uint16
    assert ids.tolist() == [256, 0x61, 0xC3, 0xA9, 257]
    assert encode(b"\xff").tolist() == [255]


@given(st.text())
def test_round_trip_over_unicode(text: str) -> None:
    assert decode(encode(text, bos=True, eos=True)) == text
    assert bytes(encode(text).astype(np.uint8)) == text.encode("utf-8")


@given(st.lists(st.text(max_size=50), max_size=8))
def test_encode_docs_puts_one_eos_after_each_doc(docs: list[str]) -> None:
    stream = encode_docs(docs)
    expected: list[int] = []
    for doc in docs:
        expected += [*doc.encode("utf-8"), EOS]
    assert stream.tolist() == expected


def test_decode_refuses_ids_outside_the_vocabulary() -> None:
    with pytest.raises(ValueError, match="259"):
        decode(np.array([65, 259]))
    assert decode([65, PAD, 66]) == "AB"


def test_pack_cuts_non_overlapping_samples_and_drops_the_partial_tail() -> None:
    stream = np.arange(23, dtype=np.uint16)
    samples = pack(stream, 4)
    assert samples.shape == (4, 5)
    assert samples[1].tolist() == [5, 6, 7, 8, 9]
    assert samples.reshape(-1).tolist() == list(range(20))


def test_pack_exact_multiple_keeps_everything() -> None:
    samples = pack(np.arange(15, dtype=np.uint16), 2)
    assert samples.shape == (5, 3)
    assert samples[-1].tolist() == [12, 13, 14]
    assert pack(np.arange(2, dtype=np.uint16), 2).shape == (0, 3)


def test_holdout_count_reads_the_fraction_as_a_decimal() -> None:
    assert holdout_count(30, 0.1) == 3  # binary 0.1 * 30 would ceil to 4
    assert holdout_count(1, 0.01) == 1
    with pytest.raises(DatasetError):
        holdout_count(10, 0.0)


def test_split_takes_the_tail_as_holdout_and_full_shards_as_train() -> None:
    samples = pack(np.arange(30 * 3, dtype=np.uint16), 2)  # 30 samples
    parts = split(samples, holdout_frac=0.1, samples_per_shard=8)
    assert len(parts.holdout) == 3
    assert parts.holdout.tolist() == samples[27:].tolist()
    assert len(parts.train) == 24
    assert parts.train.tolist() == samples[:24].tolist()
    assert parts.dropped_tail_samples == 3


def test_split_exact_fit_drops_nothing() -> None:
    samples = pack(np.arange(11 * 2, dtype=np.uint16), 1)  # 11 samples
    parts = split(samples, holdout_frac=0.05, samples_per_shard=5)
    assert (len(parts.train), len(parts.holdout), parts.dropped_tail_samples) == (10, 1, 0)


def test_split_refuses_a_corpus_smaller_than_one_shard() -> None:
    samples = pack(np.arange(9 * 2, dtype=np.uint16), 1)  # 9 samples
    with pytest.raises(DatasetError, match="corpus too small: 9 packed samples"):
        split(samples, holdout_frac=0.05, samples_per_shard=9)
    with pytest.raises(DatasetError, match="corpus too small"):
        split(samples[:0], holdout_frac=0.5, samples_per_shard=1)
