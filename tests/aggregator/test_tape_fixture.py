"""Tapes and merges recorded before issue 17's fast merge replay bit for bit (tape_fixture.py)."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest

from hypertrain.aggregator.merge import Params, aggregate_round
from hypertrain.aggregator.outerstate import unpack_outer
from hypertrain.aggregator.tape import parse_signed_tape, tape_key
from hypertrain.aggregator.tape_replay import replay_tape
from tests.aggregator.tape_fixture import FIXTURE, expect

DATA: dict[str, Any] = json.loads(FIXTURE.read_text())


class _Outer:
    def __init__(self, raw: dict[str, Any]) -> None:
        self.opt = raw["opt"]
        self.lr, self.momentum = raw["lr"], raw["momentum"]
        self.preclip_norm, self.cclip_tau = raw["preclip_norm"], raw["cclip_tau"]
        self.cclip_iters = raw["cclip_iters"]


def _params(raw: dict[str, Any]) -> Params:
    return Params.from_outer(_Outer(raw))


def test_recorded_chain_replays_bit_for_bit() -> None:
    chain = DATA["chain"]
    objects = {k: base64.b64decode(v) for k, v in chain["objects"].items()}
    params = _params(chain["params"])
    prev_out = None
    for item in chain["tapes"]:
        signed = parse_signed_tape(item["tape"])
        assert tape_key(signed) == item["key"]
        if prev_out is not None:
            assert signed.body.prev_state == prev_out
        report = replay_tape(
            signed, coord_ss58=chain["coord"], load_object=objects.__getitem__, outer_params=params
        )
        assert report.out_state == item["expect"]["out_state"]
        prev_out = report.out_state
    assert len(chain["tapes"]) == 3


@pytest.mark.parametrize("case", range(len(DATA["merges"])))
def test_recorded_merge_is_reproduced(case: int) -> None:
    raw = DATA["merges"][case]
    state = unpack_outer(base64.b64decode(raw["state"]))
    shapes = state.shapes()
    deltas = {
        hk: {
            n: np.frombuffer(base64.b64decode(b), dtype="<f4").astype(np.float32).reshape(shapes[n])
            for n, b in d.items()
        }
        for hk, d in raw["deltas"].items()
    }
    result = aggregate_round(state, deltas, _params(raw["params"]), excluded=raw["excluded"])
    assert expect(result) == raw["expect"]
