"""Generation: the logits are the one forward's, the choice rules, the seeded text."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from hypertrain.aggregator.checkpoint import ModelFile, read_model
from hypertrain.datasets.tokenizer import BOS, EOS, PAD
from hypertrain.protocol.manifest import ModelSpec
from hypertrain.trainer import generate as gen
from hypertrain.trainer.model import loss
from tests.aggregator.chain import make_chain

pytestmark = pytest.mark.usefixtures("configured")


@pytest.fixture(scope="module")
def model_file() -> ModelFile:
    """The tiny model after three real merged rounds (vocab 64, seq_len 16)."""
    return read_model(make_chain().checkpoint()["model.safetensors"])


def _text(mf: ModelFile, prompt: str = "", **kw: Any) -> str:
    settings = {"tokens": 40, "temperature": 0.8, "seed": 0} | kw
    return "".join(gen.generate_text(mf.theta, mf.model, prompt, **settings))


def _byte_model(model: ModelSpec) -> ModelSpec:
    """``model`` with the byte tokenizer's full vocabulary (only the spec: no weights)."""
    return attrs.evolve(model, vocab=259)


def test_captured_logits_give_the_forward_loss_bit_for_bit(model_file: ModelFile) -> None:
    model = model_file.model
    params = gen.torch_params(model_file.theta)
    rng = np.random.default_rng(7)
    tokens = torch.from_numpy(rng.integers(0, model.vocab, (2, model.seq_len + 1)))
    head = gen.head_logits(params, tokens, model)
    assert head.shape == (2, model.seq_len, model.vocab)
    recomputed = F.cross_entropy(head.reshape(-1, model.vocab), tokens[:, 1:].reshape(-1))
    with torch.no_grad():
        expected = loss(params, tokens, model)
    assert recomputed.numpy().tobytes() == expected.numpy().tobytes()


def test_next_logits_are_the_last_position_whatever_the_dummy_target(
    model_file: ModelFile,
) -> None:
    model = model_file.model
    params = gen.torch_params(model_file.theta)
    context = [5, 9, 2, 33, 1]
    logits = gen.next_logits(params, context, model)
    assert logits.dtype == np.float32
    assert logits.shape == (model.vocab,)
    for target in (0, 17, 63):
        row = gen.head_logits(params, torch.tensor([[*context, target]]), model)[0, -1]
        assert row.numpy().tobytes() == logits.tobytes()
    # one position: the loss of [a, t] is the cross-entropy of next_logits([a]) at t
    for a, t in ((3, 4), (60, 0)):
        one = F.cross_entropy(
            torch.from_numpy(gen.next_logits(params, [a], model))[None], torch.tensor([t])
        )
        with torch.no_grad():
            assert (
                one.numpy().tobytes()
                == loss(params, torch.tensor([[a, t]]), model).numpy().tobytes()
            )


def test_the_context_is_cut_to_seq_len(model_file: ModelFile) -> None:
    model = model_file.model
    params = gen.torch_params(model_file.theta)
    long = list(range(40))
    cut = gen.next_logits(params, long, model)
    assert cut.tobytes() == gen.next_logits(params, long[-model.seq_len :], model).tobytes()


def test_prompt_ids_start_at_the_document_boundary(model_file: ModelFile) -> None:
    tiny = model_file.model
    assert gen.prompt_ids(tiny, "1+2") == [0, ord("1"), ord("+"), ord("2")]
    assert gen.prompt_ids(_byte_model(tiny), "") == [EOS]
    assert gen.prompt_ids(_byte_model(tiny), "é") == [EOS, 0xC3, 0xA9]
    with pytest.raises(ValueError, match="byte 0x61 is outside the model's vocabulary"):
        gen.prompt_ids(tiny, "a")


def test_greedy_takes_the_lowest_of_tied_ids_and_never_bos_or_pad(model_file: ModelFile) -> None:
    allowed = np.ones(8, dtype=bool)
    logits = np.array([0, 1, 5, 2, 5, 5, 0, 0], dtype=np.float32)
    rng = np.random.Generator(np.random.PCG64(0))
    assert gen.choose(logits, allowed, 0.0, rng) == 2
    logits = np.zeros(259, dtype=np.float32)
    logits[[BOS, PAD]] = 100.0
    logits[EOS] = 50.0
    mask = gen.allowed_ids(_byte_model(model_file.model))
    assert mask.tolist() == [i not in (BOS, PAD) for i in range(259)]
    assert gen.choose(logits, mask, 0.0, rng) == EOS
    draws = {gen.choose(logits, mask, 5.0, rng) for _ in range(200)}
    assert not draws & {BOS, PAD}


def test_sampling_follows_the_softmax_and_refuses_non_finite_logits() -> None:
    allowed = np.array([True, True, False])
    logits = np.array([0.0, np.log(3.0), 99.0], dtype=np.float32)  # id 2 is not allowed
    rng = np.random.Generator(np.random.PCG64(1))
    draws = [gen.choose(logits, allowed, 1.0, rng) for _ in range(4000)]
    assert set(draws) == {0, 1}
    assert 0.72 < draws.count(1) / len(draws) < 0.78
    with pytest.raises(gen.NonFiniteLogits):
        gen.choose(np.array([0.0, np.nan, 0.0], dtype=np.float32), allowed, 1.0, rng)
    with pytest.raises(ValueError, match="temperature"):
        gen.choose(logits, allowed, -1.0, rng)


class _AlmostOne:
    """A generator whose every draw is the largest double below 1."""

    def random(self) -> float:
        return 1.0 - 2.0**-53


def test_a_draw_rounding_up_to_the_total_takes_the_last_id_with_mass() -> None:
    allowed = np.array([True, True, True, False])
    logits = np.array([0.0, 0.0, -1000.0, 0.0], dtype=np.float32)
    assert gen.choose(logits, allowed, 1.0, _AlmostOne()) == 1  # type: ignore[arg-type]


def _scripted(monkeypatch: pytest.MonkeyPatch, script: Sequence[int], vocab: int) -> None:
    """Make ``next_logits`` pick ``script`` in order (one-hot logits)."""
    steps: Iterator[int] = iter(script)

    def fake(params: object, context: Sequence[int], model: ModelSpec) -> np.ndarray:
        logits = np.zeros(vocab, dtype=np.float32)
        logits[next(steps)] = 1000.0
        return logits

    monkeypatch.setattr(gen, "next_logits", fake)


def test_generation_stops_at_eos_and_replaces_invalid_utf8(
    model_file: ModelFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _byte_model(model_file.model)
    _scripted(monkeypatch, [0x68, 0xC3, 0xA9, 0xFF, 0x69, EOS, 0x6A], model.vocab)
    ids = list(gen.generate({}, model, [EOS], tokens=10, temperature=0.0, seed=0))
    assert ids == [0x68, 0xC3, 0xA9, 0xFF, 0x69]
    _scripted(monkeypatch, [0x68, 0xC3, 0xA9, 0xFF, 0x69, 0xC3, EOS], model.vocab)
    theta = model_file.theta
    text = "".join(gen.generate_text(theta, model, "", tokens=10, temperature=0.0, seed=0))
    assert text == "hé\ufffdi\ufffd"


def test_the_same_seed_gives_the_same_text_and_greedy_ignores_it(model_file: ModelFile) -> None:
    first = _text(model_file, "1+", seed=0)
    assert len(first) == 40
    assert _text(model_file, "1+", seed=0) == first
    assert _text(model_file, "1+", seed=1) != first
    assert _text(model_file, "1+", seed=2) != first
    greedy = _text(model_file, "1+", temperature=0.0, seed=0)
    assert _text(model_file, "1+", temperature=0.0, seed=12345) == greedy
    assert greedy != first
