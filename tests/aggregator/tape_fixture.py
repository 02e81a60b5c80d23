"""The stored merge fixture: tapes and merges recorded once, to be replayed bit for bit forever.

``fixtures/merge_v1.json`` was written by ``python -m tests.aggregator.tape_fixture`` with the
merge code of before issue 17 (exact norms everywhere, the all-pairs copy screen). Any later
change to the merge must replay it unchanged (tests/aggregator/test_tape_fixture.py):

* ``chain``: three chained rounds of signed ``ht-tape-v1`` tapes over int8 payloads (preclip,
  CenteredClip clipping with two iterations, an exact copy and a scaled copy, an exclusion), with
  every object they name;
* ``merges``: ``aggregate_round`` over raw float32 deltas chosen at the edges of the arithmetic
  (norms exactly at and one ulp around ``preclip_norm`` and ``tau``, subnormals, huge values,
  copies with cancelling dots), with the whole result: out state key, ``g``, scales, screens.

Never regenerate the file to make a test pass: it is the record of today's bits.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from hypertrain.aggregator.merge import MergeResult, Params, aggregate_round, norm
from hypertrain.aggregator.outerstate import OuterState, pack_outer, state_key
from hypertrain.aggregator.tape import build_tape_body, seal_tape, tape_bytes, tape_key
from hypertrain.protocol.keys import Keypair
from hypertrain.trainer.codec import decode_payload, encode_dense_int8

FIXTURE = Path(__file__).parent / "fixtures" / "merge_v1.json"
RUN_ID = "cd" * 32
COORD = Keypair.from_seed(b"\x11" * 32)
MINERS = sorted(Keypair.from_seed(bytes([i]) * 32).ss58 for i in (20, 21, 22, 23, 24))
F32 = np.float32
SHAPES = {"b.weight": (6, 7), "a.bias": (9,), "c": (2, 2, 5)}


def params(preclip: float, tau: float, iters: int, lr: float = 0.4, mu: float = 0.9) -> Params:
    return Params(
        opt="nesterov",
        lr=F32(lr),
        momentum=F32(mu),
        preclip_norm=F32(preclip),
        cclip_tau=F32(tau),
        cclip_iters=iters,
    )


def params_json(p: Params) -> dict[str, Any]:
    return p.to_tape()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def g_key(result: MergeResult) -> str:
    return hashlib.sha256(pack_outer(OuterState(result.g, result.g, result.g))).hexdigest()


def expect(result: MergeResult) -> dict[str, Any]:
    return {
        "out_state": state_key(pack_outer(result.state_out)),
        "g": g_key(result),
        "update_norm": float(norm(result.g)).hex(),
        "inputs": [list(i) for i in result.inputs],
        "preclipped": list(result.preclipped),
        "copy_flags": [[f.a, f.b, f.overlap, f.cosine] for f in result.copy_flags],
        "raise_q": list(result.raise_q),
        "scales": {hk: list(s) for hk, s in result.scales.items()},
    }


def _rand(rng: np.random.Generator, scale: float) -> dict[str, np.ndarray]:
    return {n: (rng.standard_normal(s) * scale).astype(F32) for n, s in SHAPES.items()}


def _chain() -> dict[str, Any]:
    rng = np.random.default_rng(17)
    objects: dict[str, bytes] = {}

    def put(data: bytes) -> str:
        key = hashlib.sha256(data).hexdigest()
        objects[key] = data
        return key

    state = OuterState.genesis(_rand(rng, 1.0))
    p = params(preclip=0.8, tau=0.5, iters=2)
    tapes = []
    for w in range(3):
        prev_key = put(pack_outer(state))
        raw = {hk: _rand(rng, 0.02 + 0.05 * i) for i, hk in enumerate(MINERS)}
        raw[MINERS[1]] = raw[MINERS[0]]  # an exact copy
        raw[MINERS[3]] = {n: (x * F32(-0.5)).astype(F32) for n, x in raw[MINERS[2]].items()}
        hashes = {hk: put(encode_dense_int8(d)) for hk, d in raw.items()}
        excluded = [MINERS[4]] if w == 1 else []
        decoded = {hk: decode_payload(objects[hashes[hk]]) for hk in raw}
        result = aggregate_round(state, decoded, p, excluded=excluded)
        out_key = put(pack_outer(result.state_out))
        body = build_tape_body(RUN_ID, w, p, prev_key, state, result, out_key, hashes, excluded)
        signed = seal_tape(COORD, body)
        tapes.append({"tape": tape_bytes(signed).decode(), "key": tape_key(signed)})
        tapes[-1]["expect"] = expect(result)
        state = result.state_out
    return {
        "coord": COORD.ss58,
        "params": params_json(p),
        "tapes": tapes,
        "objects": {k: b64(v) for k, v in sorted(objects.items())},
    }


def _shaped(flat: np.ndarray) -> dict[str, np.ndarray]:
    out, at = {}, 0
    for name, shape in SHAPES.items():
        n = math.prod(shape)
        out[name] = np.ascontiguousarray(flat[at : at + n].reshape(shape), dtype=F32)
        at += n
    return out


SIZE = sum(math.prod(s) for s in SHAPES.values())


def _edge_deltas(rng: np.random.Generator, x: float) -> dict[str, np.ndarray]:
    """Deltas whose norms sit exactly at, and one float32 ulp around, ``x``; subnormals; huge."""
    out: list[np.ndarray] = []
    for target in (x, float(np.nextafter(F32(x), F32(0))), float(np.nextafter(F32(x), F32(9)))):
        one = np.zeros(SIZE, dtype=F32)
        one[rng.integers(SIZE)] = F32(target)
        out.append(one)
    pyth = np.zeros(SIZE, dtype=F32)  # 3-4-5: the norm is exactly x when x*0.2 is exact
    pyth[3], pyth[40] = F32(x * 0.6), F32(x * 0.8)
    out.append(pyth)
    out.append((rng.standard_normal(SIZE) * 1e-44).astype(F32))  # subnormal
    out.append((rng.standard_normal(SIZE) * 1e30).astype(F32))  # huge
    spread = rng.standard_normal(SIZE).astype(F32)
    spread *= F32(x) / F32(np.sqrt(np.sum(spread.astype(np.float64) ** 2)))
    out.append(spread.astype(F32))  # about x, rounding decides
    return {f"edge{i}": _shaped(d) for i, d in enumerate(out)}


def _merges() -> list[dict[str, Any]]:
    rng = np.random.default_rng(1717)
    cases = []
    for preclip, tau, iters in ((1.0, 1.0, 1), (0.75, 3.0e-3, 2), (1e30, 0.0, 1)):
        theta = _rand(rng, 1.0)
        center = _rand(rng, 0.0) if preclip == 1.0 else _rand(rng, 1e-3)
        state = OuterState(theta, u=_rand(rng, 0.01), center=center)
        deltas = _edge_deltas(rng, preclip)
        base = rng.standard_normal(SIZE).astype(F32) * F32(0.3)
        deltas["copyA"] = _shaped(base)
        deltas["copyB"] = _shaped(base.copy())
        deltas["copyNeg"] = _shaped(-base)
        noisy = base + rng.standard_normal(SIZE).astype(F32) * F32(0.1)
        deltas["copyNoisy"] = _shaped(noisy.astype(F32))
        cancel = base.copy()
        cancel[::2] = -cancel[::2]
        deltas["cancel"] = _shaped(cancel)
        p = params(preclip, tau, iters)
        result = aggregate_round(state, deltas, p, excluded=["edge6"] if iters == 2 else [])
        cases.append(
            {
                "params": params_json(p),
                "state": b64(pack_outer(state)),
                "deltas": {
                    hk: {n: b64(np.asarray(a, dtype="<f4").tobytes()) for n, a in d.items()}
                    for hk, d in deltas.items()
                },
                "excluded": ["edge6"] if iters == 2 else [],
                "expect": expect(result),
            }
        )
    return cases


def main() -> None:
    FIXTURE.parent.mkdir(exist_ok=True)
    data = {"shapes": {n: list(s) for n, s in SHAPES.items()}, "chain": _chain()}
    data["merges"] = _merges()
    FIXTURE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(FIXTURE, FIXTURE.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
