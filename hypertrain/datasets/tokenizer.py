"""The byte-level tokenizer ``ht-byte-259`` (spec/protocol.md section 10.1).

Token ids: ``0..255`` are the bytes of the UTF-8 encoding of the text, ``256`` is BOS, ``257`` EOS
and ``258`` PAD; the vocabulary has 259 ids, so every id fits a ``uint16``. The tokenizer is pinned
by :data:`TOKENIZER_SHA256`::

    sha256(b"ht-byte-tokenizer-v1|vocab=259|bytes=0..255|bos=256|eos=257|pad=258")
    = ca59f3def5da209643b28ffc6956f6710eb5b7051263ce3529fd587e4f07765f

which a manifest names as ``tokenizer = {"name": "ht-byte-259", "sha256": TOKENIZER_SHA256}``.
Encoding and decoding are vectorized numpy; arrays are ``uint16`` in native order (shards store
them little-endian, see :mod:`hypertrain.datasets.packing`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "TOKENIZER_NAME",
    "TOKENIZER_PIN_PREIMAGE",
    "TOKENIZER_SHA256",
    "VOCAB",
    "Tokens",
    "decode",
    "encode",
    "encode_docs",
    "tokenizer_json",
]

Tokens = npt.NDArray[np.uint16]
"""A 1-d (or 2-d for samples) array of token ids."""

BOS: Final = 256
EOS: Final = 257
PAD: Final = 258
VOCAB: Final = 259
TOKENIZER_NAME: Final = "ht-byte-259"
TOKENIZER_PIN_PREIMAGE: Final = (
    b"ht-byte-tokenizer-v1|vocab=259|bytes=0..255|bos=256|eos=257|pad=258"
)
TOKENIZER_SHA256: Final = hashlib.sha256(TOKENIZER_PIN_PREIMAGE).hexdigest()


def tokenizer_json() -> dict[str, str]:
    """The manifest's ``tokenizer`` object: ``{"name": "ht-byte-259", "sha256": <pin>}``."""
    return {"name": TOKENIZER_NAME, "sha256": TOKENIZER_SHA256}


def _utf8(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8")


def encode(text: str | bytes, *, bos: bool = False, eos: bool = False) -> Tokens:
    """The ids of ``text`` (a str is UTF-8 encoded first; bytes are taken as they are).

    ``bos`` prepends 256, ``eos`` appends 257.
    """
    data = np.frombuffer(_utf8(text), dtype=np.uint8).astype(np.uint16)
    parts = [data]
    if bos:
        parts.insert(0, np.array([BOS], dtype=np.uint16))
    if eos:
        parts.append(np.array([EOS], dtype=np.uint16))
    return np.concatenate(parts) if len(parts) > 1 else data


def encode_docs(docs: Iterable[str | bytes]) -> Tokens:
    """The packing stream: each doc's bytes followed by one EOS, concatenated in order."""
    blobs = [_utf8(d) for d in docs]
    total = sum(len(b) for b in blobs) + len(blobs)
    out = np.empty(total, dtype=np.uint16)
    pos = 0
    for blob in blobs:
        out[pos : pos + len(blob)] = np.frombuffer(blob, dtype=np.uint8)
        pos += len(blob)
        out[pos] = EOS
        pos += 1
    return out


def decode(ids: npt.ArrayLike, *, errors: str = "strict") -> str:
    """The text of ``ids``: special ids (BOS, EOS, PAD) are dropped, the bytes UTF-8 decoded.

    Raises ValueError for an id outside ``[0, 259)``; ``errors`` is passed to ``bytes.decode``
    (``"strict"`` raises UnicodeDecodeError on bytes that are not UTF-8, e.g. a sample cut
    inside a character; use ``"replace"`` for arbitrary samples).
    """
    arr = np.asarray(ids)
    if arr.size and (arr.min() < 0 or arr.max() >= VOCAB):
        raise ValueError(f"token ids must be in [0, {VOCAB})")
    flat = arr.reshape(-1)
    return flat[flat < BOS].astype(np.uint8).tobytes().decode("utf-8", errors)
