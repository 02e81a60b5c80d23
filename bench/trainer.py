"""Inner-step throughput: our deterministic trainer next to plain torch, in one run.

The test-mode manifest's model (2 layers, d 64, 2 heads, d_ff 256, vocab 259, seq 64,
micro-batch 2), 1 thread and the pinned CPU kernel path (``reference_spec.env``, set before
torch is imported). "ours" is :class:`hypertrain.trainer.loop.Stepper` (functional model,
sorted segment-sum embedding backward, hand-written fixed-order AdamW); "plain torch" is an
``nn.Module`` of the same dims with ``F.scaled_dot_product_attention`` and
``torch.optim.AdamW``. Also a whole H=6 round with its leaves, and the int8 delta codec's
bytes per parameter.

    .venv/bin/python bench/trainer.py
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import numpy as np

# Run as a script (sys.path[0] is bench/): the repository root too, for ``bench._timing``.
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from hypertrain.protocol.example import example_manifest
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.testmode import build_test_mode_manifest
from hypertrain.trainer.determinism import configure

SECONDS = 8.0
RUN_ID = "cd" * 32


def plain_step(manifest: RunManifest, rows: np.ndarray[Any, Any]) -> Callable[[], None]:
    """One step of a plain torch decoder of the same dims (import torch after configure)."""
    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch import nn

    m, inner = manifest.model, manifest.inner
    hd = m.d_model // m.n_heads
    kv = m.n_kv_heads * hd

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.RMSNorm(m.d_model, eps=1e-6), nn.RMSNorm(m.d_model, eps=1e-6)
            self.wq = nn.Linear(m.d_model, m.d_model, bias=False)
            self.wkv = nn.Linear(m.d_model, 2 * kv, bias=False)
            self.wo = nn.Linear(m.d_model, m.d_model, bias=False)
            self.w13 = nn.Linear(m.d_model, 2 * m.d_ff, bias=False)
            self.w2 = nn.Linear(m.d_ff, m.d_model, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            h = self.n1(x)
            q = self.wq(h).view(b, t, m.n_heads, hd).transpose(1, 2)
            k, v = self.wkv(h).view(b, t, 2, m.n_kv_heads, hd).permute(2, 0, 3, 1, 4)
            rep = m.n_heads // m.n_kv_heads
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.wo(a.transpose(1, 2).reshape(b, t, d))
            g, u = self.w13(self.n2(x)).chunk(2, dim=-1)
            out: torch.Tensor = x + self.w2(F.silu(g) * u)
            return out

    net = nn.Sequential(
        nn.Embedding(m.vocab, m.d_model),
        *[Block() for _ in range(m.n_layers)],
        nn.RMSNorm(m.d_model, eps=1e-6),
        nn.Linear(m.d_model, m.vocab, bias=False),
    )
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    batch = torch.from_numpy(rows[: inner.micro_batch].astype(np.int64))

    def step() -> None:
        logits = net(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, m.vocab), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()

    return step


def main() -> None:
    manifest, _ = build_test_mode_manifest(coord_pubkey=example_manifest().coord_pubkey)
    torch = configure(manifest.reference_spec.env)
    from bench._timing import rate
    from hypertrain.trainer.loop import Moments, StateAt, Stepper, train_round
    from hypertrain.trainer.params import init_params

    model, inner = manifest.model, manifest.inner
    long = attrs.evolve(manifest, inner=attrs.evolve(inner, H=4000, J=4000))
    per_step = inner.micro_batch * inner.grad_accum
    rng = np.random.default_rng(0)
    n = per_step * 4000
    rows = rng.integers(0, model.vocab, size=(n, model.seq_len + 1), dtype=np.uint32)
    ids = list(range(n))
    theta = init_params(model)
    zeros = {k: np.zeros_like(p) for k, p in theta.items()}
    start = StateAt(t=0, theta=theta, opt=Moments(m=zeros, v=dict(zeros), step=0))
    stepper = Stepper(long, RUN_ID, 0, ids, rows, start)
    # ours takes micro-batch j of step t from rows[(t-1)*mb:...]; plain torch reuses one batch
    ours = rate(stepper.step, SECONDS, batch=10)

    plain = rate(plain_step(manifest, rows), SECONDS, batch=10)
    h = inner.H * per_step
    t0 = time.perf_counter()
    rounds = 0
    while time.perf_counter() - t0 < 3.0:
        result = train_round(manifest, RUN_ID, 0, theta, ids[:h], rows[:h])
        rounds += 1
    round_s = (time.perf_counter() - t0) / rounds
    print(f"threads {torch.get_num_threads()}, kernels {torch.backends.cpu.get_cpu_capability()}")
    print(f"params {model.param_count:,}, tokens/step {per_step * model.seq_len}")
    print(f"ours        {ours:8.1f} steps/s")
    print(f"plain torch {plain:8.1f} steps/s")
    print(f"ratio ours/plain {ours / plain:.2f}")
    print(f"whole round H={inner.H} with {len(result.leaves)} leaves: {round_s * 1e3:.1f} ms")
    try:
        from hypertrain.trainer.codec import compress
    except ImportError:
        print("int8 codec: hypertrain/trainer/codec.py not available")
        return
    payload = compress(result.delta, None, 0.0).payload
    print(f"int8 delta: {len(payload):,} bytes, {len(payload) / model.param_count:.4f} B/param")


if __name__ == "__main__":
    main()
