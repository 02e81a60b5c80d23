"""Cross-field rules of the bodies (deadlines, chunks, bisection, manifest) with Hypothesis."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import SchemaError
from hypertrain.protocol.f32 import f32_hex
from hypertrain.protocol.jcs import MAX_SAFE_INT, canonical_json
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.messages import (
    AuditChallenge,
    Bisect,
    Commit,
    DeltaManifest,
    Finalize,
    ReplayVerdict,
    Rollback,
    RoundOpen,
)
from hypertrain.protocol.ss58 import ss58_encode
from tests.protocol.wire_samples import bodies

hex64 = st.binary(min_size=32, max_size=32).map(bytes.hex)
ss58 = st.binary(min_size=32, max_size=32).map(ss58_encode)
f32 = st.binary(min_size=4, max_size=4).map(bytes.hex)
u_int = st.integers(0, MAX_SAFE_INT)
pos_int = st.integers(1, MAX_SAFE_INT)


def _detail(cls: type[Any], body: object) -> str:
    with pytest.raises(SchemaError) as info:
        structure(cls, body)
    return info.value.detail


def _round_trips(cls: type[Any], body: dict[str, Any]) -> None:
    message = structure(cls, body)
    assert unstructure(message) == body
    assert canonical_json(unstructure(message)) == canonical_json(body)


DEADLINES = ("d_open", "d_assign", "d_commit", "d_audit", "d_upload", "d_final")


def _deadlines_ok(d: dict[str, int]) -> bool:
    chain = d["d_open"] < d["d_assign"] < d["d_commit"] < d["d_audit"] < d["d_final"]
    return chain and d["d_commit"] < d["d_upload"] <= d["d_final"]


@given(st.lists(st.integers(1, 12), min_size=6, max_size=6))
def test_round_open_deadline_order(values: list[int]) -> None:
    body = bodies()["RoundOpen"]
    body.update(zip(DEADLINES, values, strict=True))
    if _deadlines_ok(body):
        _round_trips(RoundOpen, body)
    else:
        assert "need d_" in _detail(RoundOpen, body)


@pytest.mark.parametrize(
    ("field", "value", "ok"),
    [
        ("d_assign", 100, False),  # d_open == d_assign
        ("d_commit", 120, False),
        ("d_audit", 220, False),
        ("d_final", 260, False),  # d_audit == d_final
        ("d_upload", 220, False),  # d_upload == d_commit
        ("d_upload", 601, False),  # d_upload > d_final
        ("d_upload", 600, True),  # d_upload == d_final is allowed
        ("d_upload", 221, True),  # d_upload before d_audit is allowed
    ],
)
def test_round_open_deadline_edges(field: str, value: int, ok: bool) -> None:
    body = bodies()["RoundOpen"]
    body[field] = value
    if ok:
        _round_trips(RoundOpen, body)
    else:
        assert "need d_" in _detail(RoundOpen, body)


@given(
    st.lists(st.integers(1, 2**30), max_size=8),
    hex64,
    st.sampled_from(["ht-sparse-v1", "ht-dense-int8-v1"]),
)
def test_delta_manifest_contiguous_chunks_round_trip(
    lengths: list[int], delta: str, fmt: str
) -> None:
    offsets = [0, *itertools.accumulate(lengths)]
    body = bodies()["DeltaManifest"]
    body.update(
        delta_hash=delta,
        uri=f"objects/{delta}",
        format=fmt,
        size=offsets[-1],
        chunks=[
            {"off": o, "len": n, "sha256": delta} for o, n in zip(offsets, lengths, strict=False)
        ],
    )
    _round_trips(DeltaManifest, body)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"chunks": [{"off": 1, "len": 1000, "sha256": "00" * 32}], "size": 1001},
            "$.chunks[0]: off must be 0",
        ),
        ({"size": 999}, "$.size: must equal the sum of chunk lengths (1000)"),
        ({"size": 1001}, "$.size: must equal the sum"),
        ({"uri": "objects/" + "00" * 32}, "$.uri: must be objects/{delta_hash}"),
        ({"format": "ht-zip"}, "$.format: must be one of"),
    ],
)
def test_delta_manifest_refusals(change: dict[str, Any], message: str) -> None:
    body = bodies()["DeltaManifest"]
    body.update(change)
    assert message in _detail(DeltaManifest, body)


def test_delta_manifest_chunk_gap_and_overlap() -> None:
    body = bodies()["DeltaManifest"]
    body["chunks"][1]["off"] = 601
    assert "$.chunks[1]: off must be 600" in _detail(DeltaManifest, body)
    body["chunks"][1]["off"] = 599
    assert "$.chunks[1]: off must be 600" in _detail(DeltaManifest, body)
    body.update(size=0, chunks=[])
    _round_trips(DeltaManifest, body)


@given(st.integers(2, 1024), u_int, st.integers(1, 10**6), hex64, ss58)
def test_bisect_round_trip(n: int, a: int, width: int, h: str, party: str) -> None:
    body = bodies()["Bisect"]
    body.update(N=n, interval=[a, a + width], hashes=[h] * (n + 1), party=party)
    if a + width <= MAX_SAFE_INT:
        _round_trips(Bisect, body)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"N": 1, "hashes": ["00" * 32] * 2}, "$.N: must be an int in [2, 1024]"),
        ({"N": 1025}, "$.N: must be an int in [2, 1024]"),
        ({"N": 3}, "$.hashes: must hold N+1 = 4 items"),
        ({"interval": [5, 5]}, "$.interval: must be [a, b] with ints 0 <= a < b"),
        ({"interval": [6, 5]}, "$.interval: must be [a, b]"),
        ({"interval": [5]}, "$.interval: expected an array of 2 items, got 1"),
        ({"level": "block"}, "$.level: must be one of 'step', 'layer', 'op'"),
    ],
)
def test_bisect_refusals(change: dict[str, Any], message: str) -> None:
    body = bodies()["Bisect"]
    body.update(change)
    assert message in _detail(Bisect, body)


@given(
    u_int,
    ss58,
    st.integers(1, 2**40),
    hex64,
    st.sampled_from(["full", "segments"]),
    st.lists(
        st.tuples(st.integers(0, 100), st.integers(1, 100)).map(lambda p: [p[0], p[0] + p[1]]),
        max_size=5,
    ),
    st.lists(
        st.sampled_from(["random", "final", "topQ", "probation", "outlier", "cluster", "honeypot"]),
        min_size=1,
        unique=True,
    ),
    st.integers(1, 2000),
)
def test_audit_challenge_round_trip(
    w: int,
    target: str,
    beacon: int,
    sig: str,
    mode: str,
    segments: list[list[int]],
    reasons: list[str],
    wait: int,
) -> None:
    body = {
        "w": w,
        "target": target,
        "beacon_round": beacon,
        "beacon_sig_sha256": sig,
        "mode": mode,
        "segments": segments,
        "reasons": reasons,
        "serve_deadline": beacon + wait,
    }
    _round_trips(AuditChallenge, body)


def test_audit_challenge_refusals() -> None:
    body = bodies()["AuditChallenge"]
    assert "$.reasons: must hold 1..4096 items" in _detail(AuditChallenge, {**body, "reasons": []})
    dup = {**body, "reasons": ["random", "random"]}
    assert "$.reasons: items must be distinct" in _detail(AuditChallenge, dup)
    assert "$.segments[1]: must be [a, b]" in _detail(
        AuditChallenge, {**body, "segments": [[0, 1], [2, 2]]}
    )
    late = {**body, "serve_deadline": body["beacon_round"]}
    assert "$.serve_deadline: must be after beacon_round" in _detail(AuditChallenge, late)


@given(u_int, ss58, hex64, st.integers(1, 2**20), u_int, u_int)
def test_commit_round_trip(
    w: int, hotkey: str, h: str, n_leaves: int, size: int, tokens: int
) -> None:
    body = bodies()["Commit"]
    body.update(
        w=w, hotkey=hotkey, leaves_root=h, n_leaves=n_leaves, delta_bytes=size, tokens=tokens
    )
    _round_trips(Commit, body)


def test_commit_leaf_scheme_is_fixed() -> None:
    body = bodies()["Commit"]
    assert "$.leaf_scheme: must be one of 'ht-leaf-v1'" in _detail(
        Commit, {**body, "leaf_scheme": "ht-leaf-v2"}
    )
    assert "$.n_leaves: must be an int in [1, 2^53-1]" in _detail(Commit, {**body, "n_leaves": 0})


@given(st.none() | u_int)
def test_replay_verdict_first_bad_leaf_is_int_or_null(first_bad: int | None) -> None:
    body = bodies()["ReplayVerdict"]
    body["first_bad_leaf"] = first_bad
    _round_trips(ReplayVerdict, body)


def test_rollback_and_finalize_lists() -> None:
    rollback = bodies()["Rollback"]
    assert "$.excluded: must hold 1..4096" in _detail(Rollback, {**rollback, "excluded": []})
    dup = {**rollback, "recomputed": ["agg_w", "agg_w"]}
    assert "$.recomputed: items must be distinct" in _detail(Rollback, dup)
    finalize = bodies()["Finalize"]
    unsorted = {**finalize, "included": finalize["included"][::-1]}
    assert "$.included: items must be sorted" in _detail(Finalize, unsorted)
    _round_trips(Finalize, {**finalize, "included": []})


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("inner", "J"), 7, "$.inner.J: must divide H"),
        (
            ("verify", "T", "audit_after_commit"),
            39,
            "$.verify.T.audit_after_commit: must be an int in [40,",
        ),
        (("verify", "E_vest_rounds"), 9, "$.verify.E_vest_rounds: must be >= ceil(1/q_base) = 10"),
        (("verify", "q_base"), f32_hex(0.0), "$.verify.q_base: must be in (0, 1]"),
        (("verify", "q_base"), f32_hex(1.5), "$.verify.q_base: must be in (0, 1]"),
        (
            ("reference_spec", "layout", "n_gpus"),
            2,
            "$.reference_spec.layout.n_gpus: must equal dp_size * ep_size",
        ),
        (("model", "arch"), "od-encoder", "$.model.od: must be present exactly when"),
        (
            ("reference_spec", "profile"),
            "od-fp32-ref-v1",
            "$.reference_spec: profile is only allowed",
        ),
        (("model", "capacity_factor"), "0000803F", "$.model.capacity_factor: must be f32 hex"),
        (
            ("reference_spec", "image_digest"),
            "sha256:" + "0" * 63,
            "$.reference_spec.image_digest: must be sha256:",
        ),
        (("coord_pubkey",), "5" * 48, "$.coord_pubkey: must be an SS58 address"),
        (("auditors",), ["x"], "$.auditors[0]: must be an SS58 address"),
        (("inner", "betas"), [f32_hex(0.9)], "$.inner.betas: expected an array of 2 items"),
    ],
)
def test_manifest_rules(path: tuple[str, ...], value: object, message: str) -> None:
    body = bodies()["RunManifest"]
    target = body
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    assert message in _detail(RunManifest, body)


def test_manifest_e_vest_rounds_is_exact_on_the_f32_value() -> None:
    body = bodies()["RunManifest"]
    body["verify"].update(q_base=f32_hex(0.5), E_vest_rounds=2, probation_rounds=2)
    structure(RunManifest, body)
    body["verify"].update(q_base=f32_hex(0.04), E_vest_rounds=25)  # f32(0.04) < 1/25: ceil = 26
    assert "ceil(1/q_base) = 26" in _detail(RunManifest, body)
    body["verify"]["E_vest_rounds"] = 26
    structure(RunManifest, body)
