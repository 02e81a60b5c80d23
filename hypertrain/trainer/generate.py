"""Text from a model: next-token logits by the one forward, then greedy or seeded sampling.

Imports torch: run :func:`hypertrain.trainer.determinism.configure` first (``hypertrain sample``
does, with one thread and deterministic algorithms). Promises, in the order the code applies
them:

- **The logits are the forward's.** :func:`next_logits` runs
  :func:`hypertrain.trainer.model.forward` on ``[1, T+1]`` int64 tokens (the context and one
  dummy target, id 0) and captures the ``"head"`` op of the tail layer ``model.n_layers``
  through the tap; the logits at the last real position are the answer. No second forward
  exists, so what is sampled is what training and disputes compute.
- **The context is the last ``model.seq_len`` tokens.** It always starts with one boundary
  token (:func:`start_token`: EOS, which precedes every document in the packed stream, since
  ``ht-byte-259`` packing writes no BOS; id 0 when the model's vocabulary is too small to hold
  EOS, as the test model's is), then the prompt's bytes.
- **Never emitted:** BOS and PAD, and any id the byte tokenizer does not have (``>= 259``).
  A generated EOS ends the text and is not emitted.
- **Choice.** ``temperature == 0`` is greedy: the argmax over the allowed ids, ties to the
  lowest id (the seed is not used). Otherwise ``p = softmax((l - max l) / temperature)`` in
  float64 over the allowed ids and one draw ``u = rng.random()`` of
  ``numpy.random.Generator(PCG64(seed))`` picks the first id whose cumulative mass exceeds
  ``u * total``. The same checkpoint, prompt, settings and seed give the same ids on the same
  machine and torch build.
- **Decoding never fails:** the bytes are UTF-8 decoded incrementally with ``errors="replace"``
  (a byte sequence cut inside a character becomes U+FFFD), the tokenizer's rule for samples.
"""

from __future__ import annotations

import codecs
import math
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import torch

from hypertrain.datasets.tokenizer import BOS, EOS, PAD, VOCAB, encode
from hypertrain.protocol.manifest import ModelSpec
from hypertrain.trainer.model import forward
from hypertrain.trainer.params import F32Array

__all__ = [
    "NonFiniteLogits",
    "allowed_ids",
    "choose",
    "generate",
    "generate_text",
    "head_logits",
    "next_logits",
    "prompt_ids",
    "start_token",
    "torch_params",
]

_DUMMY_TARGET = 0


class NonFiniteLogits(ValueError):
    """The model's logits hold NaN or infinity (a diverged or damaged model)."""


def start_token(model: ModelSpec) -> int:
    """The boundary token every context starts with: EOS, or 0 when ``model.vocab <= EOS``."""
    return EOS if model.vocab > EOS else 0


def prompt_ids(model: ModelSpec, prompt: str) -> list[int]:
    """The context of ``prompt``: the start token, then its UTF-8 bytes.

    ValueError when a byte is not an id of the model (its vocabulary is smaller than 256).
    """
    ids = [int(i) for i in encode(prompt)]
    outside = [i for i in ids if i >= model.vocab]
    if outside:
        raise ValueError(
            f"prompt byte 0x{outside[0]:02x} is outside the model's vocabulary ({model.vocab} ids)"
        )
    return [start_token(model), *ids]


def allowed_ids(model: ModelSpec) -> np.ndarray[tuple[int], np.dtype[np.bool_]]:
    """A mask over ``model.vocab`` ids: True for the ids that may be generated (bytes and EOS)."""
    allowed = np.arange(model.vocab) < VOCAB
    allowed[[i for i in (BOS, PAD) if i < model.vocab]] = False
    return allowed


def torch_params(theta: Mapping[str, F32Array]) -> dict[str, torch.Tensor]:
    """``theta`` as float32 torch tensors (copies: the caller's arrays are never shared)."""
    return {n: torch.from_numpy(np.array(a, dtype=np.float32)) for n, a in theta.items()}


def head_logits(
    params: Mapping[str, torch.Tensor], tokens: torch.Tensor, model: ModelSpec
) -> torch.Tensor:
    """The logits ``[B, T, vocab]`` of ``tokens`` ``[B, T+1]``: :func:`forward`'s ``"head"`` op
    of the tail layer, captured through the tap (no gradient is recorded)."""
    captured: list[torch.Tensor] = []

    def tap(layer: int, op: str, out: torch.Tensor) -> torch.Tensor:
        if layer == model.n_layers and op == "head":
            captured.append(out)
        return out

    with torch.no_grad():
        forward(params, tokens, model, tap)
    (head,) = captured
    return head


def next_logits(
    params: Mapping[str, torch.Tensor], context: Sequence[int], model: ModelSpec
) -> F32Array:
    """The float32 logits ``[vocab]`` of the token after ``context`` (its last ``seq_len``)."""
    window = list(context[-model.seq_len :])
    if not window:
        raise ValueError("the context is empty")
    tokens = torch.tensor([[*window, _DUMMY_TARGET]], dtype=torch.int64)
    logits: F32Array = head_logits(params, tokens, model)[0, -1].numpy().copy()
    return logits


def choose(
    logits: F32Array,
    allowed: np.ndarray[tuple[int], np.dtype[np.bool_]],
    temperature: float,
    rng: np.random.Generator,
) -> int:
    """The next id (module docstring: greedy at 0, else one seeded draw from the softmax).

    NonFiniteLogits when an allowed id's logit is NaN or infinite.
    """
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be finite and >= 0, got {temperature}")
    if not np.isfinite(logits[allowed]).all():
        raise NonFiniteLogits("the model's logits are not finite")
    masked = np.where(allowed, logits.astype(np.float64), -np.inf)
    if temperature == 0:
        return int(np.argmax(masked))  # the first maximum: ties go to the lowest id
    weights = np.exp((masked - masked.max()) / temperature)
    cumulative = np.cumsum(weights)
    pick = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    if pick >= len(weights):  # u * total rounded up to total: the last id with mass
        pick = int(np.flatnonzero(weights)[-1])
    return pick


def generate(
    params: Mapping[str, torch.Tensor],
    model: ModelSpec,
    context: Sequence[int],
    *,
    tokens: int,
    temperature: float,
    seed: int,
) -> Iterator[int]:
    """Up to ``tokens`` ids after ``context``, stopping before a generated EOS."""
    rng = np.random.Generator(np.random.PCG64(seed))
    allowed = allowed_ids(model)
    ids = list(context)
    for _ in range(tokens):
        nxt = choose(next_logits(params, ids, model), allowed, temperature, rng)
        if nxt == EOS:
            return
        ids.append(nxt)
        yield nxt


def generate_text(
    theta: Mapping[str, F32Array],
    model: ModelSpec,
    prompt: str,
    *,
    tokens: int,
    temperature: float,
    seed: int,
) -> Iterator[str]:
    """The text generated after ``prompt`` by the model ``theta``, in pieces as its bytes
    complete characters. ValueError, at once, for a prompt the model cannot read
    (:func:`prompt_ids`) or a bad temperature."""
    context = prompt_ids(model, prompt)
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be finite and >= 0, got {temperature}")
    ids = generate(
        torch_params(theta), model, context, tokens=tokens, temperature=temperature, seed=seed
    )
    return _decoded(ids)


def _decoded(ids: Iterator[int]) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for i in ids:
        piece = decoder.decode(bytes([i]))
        if piece:
            yield piece
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail
