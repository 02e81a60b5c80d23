"""Leaf preimages and digests of one round (spec 5.5, hashes per spec 2.5).

A leaf is taken at ``t = 0, J, 2J, ..., H``. Its preimage (:class:`LeafPreimage`)::

    stages           per pipeline stage k < n_stages = layout.pp: TH of the stage's theta, m, v
                     (emb.* -> stage 0; layers.i.* -> i * n_stages // n_layers; the rest, i.e.
                     norm.weight and head.weight -> stage n_stages - 1); a stage that owns no
                     tensor hashes as TH({}) = sha256(b"")
    batch_ids_sha256 sha256(u64le(id)*) of the sample ids of steps t-J+1..t (empty at t = 0)
    rng_ctr          rng_ctr(run_id, w, t, -1)
    loss_f32         f32 of the mean cross-entropy of step t (0 at t = 0): the float64 mean of
                     the grad_accum micro-batch losses, each a float32 value (*ours*)
    norm_f32         f32(||theta_t - theta_{t-J}||_2), the norm in float64 over sorted names
                     (0 at t = 0)

``digest = leaf_digest(...)`` (``ht-leaf-v1``); ``leaves_root`` is the Merkle root of the
digests, ``metrics_root`` the Merkle root of ``loss_f32 || norm_f32`` (8 bytes) per leaf.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from hypertrain.protocol.hashes import (
    batch_ids_sha256,
    leaf_digest,
    metrics_leaf,
    parse_hex32,
    rng_ctr,
    stage_root,
)
from hypertrain.protocol.merkle import merkle_root_hex
from hypertrain.protocol.messages import LeafPreimage, StageState
from hypertrain.protocol.tensorhash import th_bytes
from hypertrain.trainer.params import F32Array

__all__ = [
    "Leaf",
    "build_leaf",
    "leaves_root",
    "metrics_root",
    "preimage_digest",
    "stage_of",
    "stage_states",
    "theta_distance",
]

_LAYER = re.compile(r"layers\.(\d+)\.")


@attrs.frozen
class Leaf:
    """One leaf: its preimage (what a miner posts) and its 32-byte digest."""

    preimage: LeafPreimage
    digest: bytes

    @property
    def t(self) -> int:
        """The inner step of the leaf."""
        return self.preimage.t


def stage_of(name: str, n_layers: int, n_stages: int) -> int:
    """The pipeline stage owning tensor ``name`` (module docstring)."""
    if name.startswith("emb."):
        return 0
    match = _LAYER.match(name)
    if match is not None:
        return int(match.group(1)) * n_stages // n_layers
    return n_stages - 1


def stage_states(
    theta: Mapping[str, F32Array],
    m: Mapping[str, F32Array],
    v: Mapping[str, F32Array],
    n_layers: int,
    n_stages: int,
) -> tuple[StageState, ...]:
    """TH of theta, m and v restricted to each stage's tensors, stage 0 first."""
    owned: list[list[str]] = [[] for _ in range(n_stages)]
    for name in theta:
        owned[stage_of(name, n_layers, n_stages)].append(name)
    return tuple(
        StageState(
            theta=th_bytes({n: theta[n] for n in names}).hex(),
            m=th_bytes({n: m[n] for n in names}).hex(),
            v=th_bytes({n: v[n] for n in names}).hex(),
        )
        for names in owned
    )


def theta_distance(a: Mapping[str, F32Array], b: Mapping[str, F32Array]) -> float:
    """``||a - b||_2``: float32 differences, squares summed in float64 over sorted names."""
    total = 0.0
    for name in sorted(a):
        diff = (a[name] - b[name]).astype(np.float64)
        total += float(np.dot(diff.ravel(), diff.ravel()))
    return float(np.sqrt(total))


def _f32_le_hex(x: float) -> str:
    """The 4 little-endian float32 bytes of ``x`` (nearest, NaN kept) as hex."""
    return np.array(x, dtype="<f4").tobytes().hex()


def preimage_digest(p: LeafPreimage) -> bytes:
    """The ``ht-leaf-v1`` digest of a preimage."""
    root = stage_root(
        [(bytes.fromhex(s.theta), bytes.fromhex(s.m), bytes.fromhex(s.v)) for s in p.stages]
    )
    return leaf_digest(
        run_id=parse_hex32(p.run_id, "run_id"),
        w=p.w,
        t=p.t,
        stage_root=root,
        batch_ids_sha256=bytes.fromhex(p.batch_ids_sha256),
        rng_ctr=p.rng_ctr,
        loss_f32=bytes.fromhex(p.loss_f32),
        norm_f32=bytes.fromhex(p.norm_f32),
    )


def build_leaf(
    *,
    run_id: str,
    w: int,
    t: int,
    stages: tuple[StageState, ...],
    window_ids: Sequence[int],
    loss: float,
    norm: float,
) -> Leaf:
    """The leaf at step ``t`` from its parts (``window_ids``: ids of steps t-J+1..t)."""
    preimage = LeafPreimage(
        run_id=run_id,
        w=w,
        t=t,
        stages=stages,
        batch_ids_sha256=batch_ids_sha256(list(window_ids)).hex(),
        rng_ctr=rng_ctr(run_id, w, t, -1),
        loss_f32=_f32_le_hex(loss),
        norm_f32=_f32_le_hex(norm),
    )
    return Leaf(preimage=preimage, digest=preimage_digest(preimage))


def leaves_root(leaves: Sequence[Leaf]) -> str:
    """Merkle root (hex) of the leaf digests."""
    return merkle_root_hex([leaf.digest for leaf in leaves])


def metrics_root(leaves: Sequence[Leaf]) -> str:
    """Merkle root (hex) of ``loss_f32 || norm_f32`` per leaf."""
    return merkle_root_hex(
        [
            metrics_leaf(
                bytes.fromhex(leaf.preimage.loss_f32), bytes.fromhex(leaf.preimage.norm_f32)
            )
            for leaf in leaves
        ]
    )
