"""The inner learning rate: WSD on the global step times the per-round re-warmup (spec 5.3).

For inner step ``t`` (``1..H``) of round ``w``, the global step is ``s = w*H + t - 1`` and::

    base(s) = (s + 1) / warmup                       s < warmup
            = 1                                      warmup <= s < warmup + stable
            = 1 - (s - warmup - stable) / decay      warmup + stable <= s < warmup+stable+decay
            = 0  (1 when decay == 0)                 after
    ramp(t) = t / rewarmup_steps                     t <= rewarmup_steps   ((t_round + 1) / r
            = 1                                      otherwise              with t_round = t - 1)
    lr      = peak_lr * base(s) * ramp(t)

all in float64 (``peak_lr`` is the manifest's f32 value). The optimizer rounds the scalars it
derives from ``lr`` to float32 (see :mod:`hypertrain.trainer.optim`).
"""

from __future__ import annotations

from hypertrain.protocol.f32 import f32_from_hex
from hypertrain.protocol.manifest import InnerSpec, LrSchedule

__all__ = ["global_step", "inner_lr", "rewarmup_factor", "wsd_base"]


def wsd_base(s: int, sched: LrSchedule) -> float:
    """``base(s)`` of the module docstring."""
    if s < 0:
        raise ValueError(f"global step {s} is negative")
    warmup, stable, decay = sched.warmup, sched.stable, sched.decay
    if s < warmup:
        return (s + 1) / warmup
    if s < warmup + stable:
        return 1.0
    if s < warmup + stable + decay:
        return 1.0 - (s - warmup - stable) / decay
    return 1.0 if decay == 0 else 0.0


def rewarmup_factor(t: int, rewarmup_steps: int) -> float:
    """``ramp(t)`` for inner step ``t >= 1`` of a round."""
    if t < 1:
        raise ValueError(f"inner step {t} must be >= 1")
    if rewarmup_steps and t <= rewarmup_steps:
        return t / rewarmup_steps
    return 1.0


def global_step(w: int, t: int, H: int) -> int:  # noqa: N803
    """``s = w*H + t - 1`` for inner step ``t >= 1`` of round ``w``."""
    return w * H + t - 1


def inner_lr(inner: InnerSpec, w: int, t: int) -> float:
    """``lr`` of inner step ``t`` of round ``w`` (float64)."""
    sched = inner.lr_schedule
    s = global_step(w, t, inner.H)
    peak = f32_from_hex(sched.peak_lr)
    return peak * wsd_base(s, sched) * rewarmup_factor(t, inner.rewarmup_steps)
