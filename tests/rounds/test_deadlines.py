"""Deadline arithmetic of spec 4.1, the RoundOpen ordering rule and time <-> round."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypertrain.beacon.chain import QUICKNET, ChainInfo
from hypertrain.protocol.converter import structure
from hypertrain.protocol.example import example_bodies
from hypertrain.protocol.manifest import RunManifest, Timeouts
from hypertrain.protocol.messages import RoundOpen
from hypertrain.protocol.validators import FieldError
from hypertrain.rounds import Deadlines, RunConfig, round_at_or_after, serve_deadline, template
from tests.rounds.conftest import HOTKEYS

EXAMPLE_T = Timeouts(
    assign_after_open=20,
    audit_after_commit=40,
    upload_after_commit=300,
    serve_deadline=900,
    dispute_per_level=600,
)


def test_template_example_numbers() -> None:
    dl = template(1000, EXAMPLE_T, RunConfig(train_rounds=100, final_after_upload=50))
    assert dl.as_dict() == {
        "d_open": 1000,
        "d_assign": 1020,
        "d_commit": 1120,
        "d_audit": 1160,
        "d_upload": 1420,
        "d_final": 1470,
    }
    # spec 4.1 NOTE: serve_deadline = d_commit + 940, later than d_final.
    assert serve_deadline(dl.d_audit, EXAMPLE_T) == 2060 == dl.d_commit + 940
    assert serve_deadline(dl.d_audit, EXAMPLE_T) > dl.d_final


def test_template_uses_the_manifest_timeouts(manifest: RunManifest) -> None:
    dl = template(7, manifest.verify.T, RunConfig(train_rounds=3, final_after_upload=1))
    assert (dl.d_assign, dl.d_commit, dl.d_audit, dl.d_upload, dl.d_final) == (
        27,
        30,
        70,
        330,
        331,
    )


def test_d_final_follows_the_later_of_audit_and_upload() -> None:
    t = Timeouts(
        assign_after_open=1,
        audit_after_commit=500,
        upload_after_commit=10,
        serve_deadline=5,
        dispute_per_level=1,
    )
    dl = template(1, t, RunConfig(train_rounds=1, final_after_upload=2))
    assert (dl.d_commit, dl.d_audit, dl.d_upload, dl.d_final) == (3, 503, 13, 505)


@given(
    d_open=st.integers(1, 2**40),
    assign_after=st.integers(1, 10**4),
    audit_after=st.integers(40, 10**4),
    upload_after=st.integers(1, 10**4),
    train=st.integers(1, 10**6),
    final_after=st.integers(1, 10**6),
)
def test_template_always_satisfies_round_open(
    d_open: int,
    assign_after: int,
    audit_after: int,
    upload_after: int,
    train: int,
    final_after: int,
) -> None:
    t = Timeouts(
        assign_after_open=assign_after,
        audit_after_commit=audit_after,
        upload_after_commit=upload_after,
        serve_deadline=1,
        dispute_per_level=1,
    )
    dl = template(d_open, t, RunConfig(train_rounds=train, final_after_upload=final_after))
    assert dl.d_final == max(dl.d_audit, dl.d_upload) + final_after
    body = example_bodies(HOTKEYS[0], HOTKEYS[1])["RoundOpen"]
    ro = structure(RoundOpen, {**body, **dl.as_dict()})
    assert Deadlines.of(ro) == dl


def test_deadlines_of_round_open() -> None:
    ro = structure(RoundOpen, example_bodies(HOTKEYS[0], HOTKEYS[1])["RoundOpen"])
    assert Deadlines.of(ro) == Deadlines(100, 120, 220, 260, 520, 600)


VALID = {"d_open": 10, "d_assign": 20, "d_commit": 30, "d_audit": 40, "d_upload": 50, "d_final": 60}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"d_assign": 10}, "d_final"),  # d_open == d_assign
        ({"d_commit": 20}, "d_final"),  # d_assign == d_commit
        ({"d_audit": 30}, "d_final"),  # d_commit == d_audit
        ({"d_final": 40, "d_upload": 40}, "d_final"),  # d_audit == d_final
        ({"d_upload": 30}, "d_upload"),  # d_commit == d_upload
        ({"d_upload": 61}, "d_upload"),  # d_upload > d_final
        ({"d_open": 0}, "d_open"),
    ],
)
def test_deadline_order_is_enforced(change: dict[str, int], field: str) -> None:
    with pytest.raises(FieldError) as info:
        Deadlines(**{**VALID, **change})
    assert info.value.field == field


def test_upload_may_equal_final_and_precede_audit() -> None:
    Deadlines(**{**VALID, "d_upload": 60})
    Deadlines(**{**VALID, "d_upload": 35})


def test_window_predicates() -> None:
    dl = Deadlines(**VALID)
    assert [dl.accept_open(d) for d in (19, 20, 29, 30)] == [False, True, True, False]
    assert [dl.commit_excluded(r) for r in (39, 40)] == [False, True]
    assert [dl.upload_open(d) for d in (49, 50)] == [True, False]
    assert [dl.audit_due(d) for d in (39, 40)] == [False, True]
    assert [dl.finalize_due(d) for d in (59, 60)] == [False, True]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"train_rounds": 0, "final_after_upload": 1},
        {"train_rounds": 1, "final_after_upload": 0},
        {"train_rounds": 10**6 + 1, "final_after_upload": 1},
        {"train_rounds": 1, "final_after_upload": 10**6 + 1},
        {"train_rounds": True, "final_after_upload": 1},
        {"train_rounds": 1, "final_after_upload": 1, "total_rounds": 0},
    ],
)
def test_run_config_bounds(kwargs: dict[str, int]) -> None:
    with pytest.raises(FieldError):
        RunConfig(**kwargs)


def test_run_config_limits_accepted() -> None:
    assert RunConfig(train_rounds=10**6, final_after_upload=10**6).total_rounds is None
    assert RunConfig(train_rounds=1, final_after_upload=1, total_rounds=5).total_rounds == 5


def _spec_round_at_or_after(t: float, genesis: int, period: int) -> int:
    return 1 if t <= genesis else math.ceil((t - genesis) / period) + 1


@given(st.integers(QUICKNET.genesis_ms // 1000 - 100, QUICKNET.genesis_ms // 1000 + 10**7))
def test_round_at_or_after_matches_spec_formula(t: int) -> None:
    assert round_at_or_after(QUICKNET, t) == _spec_round_at_or_after(t, 1692803367, 3)


@given(st.integers(0, 10**12))
def test_round_at_or_after_agrees_with_chain_info(offset_ms: int) -> None:
    chain = ChainInfo(public_key="00", period_ms=500, genesis_ms=1_000_000, hash="0" * 64)
    t = (chain.genesis_ms + offset_ms) / 1000
    r = round_at_or_after(chain, t)
    assert chain.time_of(r) >= t
    assert r == 1 or chain.time_of(r - 1) < t
    if chain.round_at(t) >= 1 and chain.time_of(chain.round_at(t)) == t:
        assert r == chain.round_at(t)


def test_round_at_or_after_edges() -> None:
    g = QUICKNET.genesis_ms / 1000
    assert round_at_or_after(QUICKNET, g - 1) == 1
    assert round_at_or_after(QUICKNET, g) == 1
    assert round_at_or_after(QUICKNET, g + 0.001) == 2
    assert round_at_or_after(QUICKNET, g + 3) == 2
    assert round_at_or_after(QUICKNET, g + 3.001) == 3
    assert round_at_or_after(QUICKNET, g + 3.0004) == 3  # sub-millisecond: still after round 2
    assert round_at_or_after(QUICKNET, g + 2.9999999) == 2
    assert round_at_or_after(QUICKNET, QUICKNET.time_of(12345)) == 12345
    with pytest.raises(ValueError, match="finite"):
        round_at_or_after(QUICKNET, math.nan)
