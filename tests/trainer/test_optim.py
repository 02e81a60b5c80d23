"""AdamW against float64 and torch.optim.AdamW; WSD and re-warmup values (spec 5.3)."""

from __future__ import annotations

import math

import attrs
import numpy as np
import pytest
import torch

from hypertrain.protocol.f32 import f32_hex
from hypertrain.protocol.manifest import RunManifest
from hypertrain.trainer.errors import UnsupportedPolicy
from hypertrain.trainer.optim import AdamWHyper, OptState, adamw_step, global_grad_norm
from hypertrain.trainer.schedule import global_step, inner_lr, rewarmup_factor, wsd_base
from tests.trainer.helpers import tiny_manifest

HYPER = AdamWHyper(beta1=0.9, beta2=0.95, eps=1e-8, wd=0.1, grad_clip=1.0)


def _tensors(seed: int, scale: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "a.w": (rng.standard_normal((3, 4)) * scale).astype(np.float32),
        "b.bias": (rng.standard_normal(5) * scale).astype(np.float32),
    }


def _reference(
    params: dict[str, np.ndarray], grads_seq: list[dict[str, np.ndarray]], lrs: list[float]
) -> dict[str, np.ndarray]:
    """The spec 5.3 math in float64, written independently of optim.py."""
    p = {n: x.astype(np.float64) for n, x in params.items()}
    m = {n: np.zeros_like(x) for n, x in p.items()}
    v = {n: np.zeros_like(x) for n, x in p.items()}
    for step, (grads, lr) in enumerate(zip(grads_seq, lrs, strict=True), start=1):
        g64 = {n: g.astype(np.float64) for n, g in grads.items()}
        norm = math.sqrt(sum(float((g**2).sum()) for g in g64.values()))
        clip = min(1.0, HYPER.grad_clip / (norm + 1e-6))
        bc1, bc2 = 1 - HYPER.beta1**step, 1 - HYPER.beta2**step
        for n in p:
            g = g64[n] * clip
            m[n] = HYPER.beta1 * m[n] + (1 - HYPER.beta1) * g
            v[n] = HYPER.beta2 * v[n] + (1 - HYPER.beta2) * g * g
            if p[n].ndim >= 2:
                p[n] = p[n] * (1 - lr * HYPER.wd)
            p[n] = p[n] - (lr / bc1) * m[n] / (np.sqrt(v[n] / bc2) + HYPER.eps)
    return p


@pytest.mark.parametrize("grad_scale", [0.01, 3.0])  # clip inactive / active
def test_adamw_matches_float64_reference(grad_scale: float) -> None:
    start = _tensors(0, 1.0)
    grads_seq = [_tensors(10 + k, grad_scale) for k in range(4)]
    lrs = [1e-2, 2e-2, 3e-2, 1e-2]
    params = {n: torch.from_numpy(x.copy()) for n, x in start.items()}
    state = OptState(
        m={n: torch.zeros_like(x) for n, x in params.items()},
        v={n: torch.zeros_like(x) for n, x in params.items()},
        step=0,
    )
    for grads, lr in zip(grads_seq, lrs, strict=True):
        adamw_step(params, {n: torch.from_numpy(g) for n, g in grads.items()}, state, lr, HYPER)
    assert state.step == 4
    ref = _reference(start, grads_seq, lrs)
    for n, x in params.items():
        np.testing.assert_allclose(x.numpy(), ref[n], rtol=2e-6, atol=2e-7)
    # The vector is not decayed: with zero grads only the matrix shrinks.
    frozen = {n: torch.from_numpy(x.copy()) for n, x in start.items()}
    fresh = OptState(m={n: torch.zeros_like(x) for n, x in frozen.items()}, v={}, step=0)
    fresh.v = {n: torch.zeros_like(x) for n, x in frozen.items()}
    adamw_step(frozen, {n: torch.zeros_like(x) for n, x in frozen.items()}, fresh, 0.5, HYPER)
    assert np.array_equal(frozen["b.bias"].numpy(), start["b.bias"])
    assert np.array_equal(frozen["a.w"].numpy(), start["a.w"] * np.float32(1 - 0.5 * 0.1))


def test_adamw_matches_torch_adamw_where_definitions_coincide() -> None:
    """No clipping (small grads, large grad_clip), weight decay on matrices only."""
    hyper = attrs.evolve(HYPER, grad_clip=1e9)
    start = _tensors(1, 1.0)
    ours = {n: torch.from_numpy(x.copy()) for n, x in start.items()}
    state = OptState(
        m={n: torch.zeros_like(x) for n, x in ours.items()},
        v={n: torch.zeros_like(x) for n, x in ours.items()},
        step=0,
    )
    theirs = {n: torch.nn.Parameter(torch.from_numpy(x.copy())) for n, x in start.items()}
    opt = torch.optim.AdamW(
        [
            {"params": [theirs["a.w"]], "weight_decay": hyper.wd},
            {"params": [theirs["b.bias"]], "weight_decay": 0.0},
        ],
        lr=1e-2,
        betas=(hyper.beta1, hyper.beta2),
        eps=hyper.eps,
        foreach=False,
    )
    for k in range(5):
        grads = {n: torch.from_numpy(g) for n, g in _tensors(20 + k, 0.1).items()}
        adamw_step(ours, grads, state, 1e-2, hyper)
        for n, p in theirs.items():
            p.grad = grads[n].clone()
        opt.step()
    for n in ours:
        np.testing.assert_allclose(ours[n].numpy(), theirs[n].detach().numpy(), rtol=1e-5)


def test_global_grad_norm_is_float64_over_sorted_names() -> None:
    grads = {"z": torch.full((2,), 3.0), "a": torch.full((1,), 4.0)}
    assert global_grad_norm(grads) == math.sqrt(9 + 9 + 16)


def _sched_manifest(*, warmup: int, stable: int, decay: int) -> RunManifest:
    m = tiny_manifest(policy="reset")
    lr = attrs.evolve(
        m.inner.lr_schedule, peak_lr=f32_hex(1.0), warmup=warmup, stable=stable, decay=decay
    )
    return attrs.evolve(m, inner=attrs.evolve(m.inner, lr_schedule=lr))


def test_wsd_boundaries() -> None:
    sched = _sched_manifest(warmup=4, stable=3, decay=2).inner.lr_schedule
    values = [wsd_base(s, sched) for s in range(11)]
    assert values == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 0.0]
    no_decay = _sched_manifest(warmup=0, stable=2, decay=0).inner.lr_schedule
    assert [wsd_base(s, no_decay) for s in range(4)] == [1.0, 1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="negative"):
        wsd_base(-1, sched)


def test_lr_is_on_the_global_step_with_rewarmup() -> None:
    m = _sched_manifest(warmup=4, stable=100, decay=10)
    assert global_step(w=2, t=1, H=6) == 12
    assert inner_lr(m.inner, 0, 1) == 0.25
    assert inner_lr(m.inner, 0, 4) == 1.0
    assert inner_lr(m.inner, 1, 1) == 1.0  # s = 6: past warmup
    ramped = attrs.evolve(m.inner, rewarmup_steps=3)
    assert [inner_lr(ramped, 1, t) for t in (1, 2, 3, 4)] == [1 / 3, 2 / 3, 1.0, 1.0]
    assert rewarmup_factor(1, 0) == 1.0


def test_unsupported_policies_are_refused() -> None:
    inner = tiny_manifest().inner
    for bad in (
        attrs.evolve(inner, opt="muon"),
        attrs.evolve(inner, state_policy="derived"),
        attrs.evolve(inner, rewarmup_steps=2),  # carry with re-warmup
    ):
        with pytest.raises(UnsupportedPolicy):
            AdamWHyper.from_inner(bad)
    assert AdamWHyper.from_inner(attrs.evolve(inner, state_policy="reset", rewarmup_steps=2))
