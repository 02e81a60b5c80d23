"""The slices of a hidden trace combine into the unsliced ``delta-loss`` answer, bit for bit
(issue 19 item 4; :mod:`hypertrain.scoring.slices`): the real scorer on the CPU test-mode
model, on the whole trace and on its slices, even and uneven."""

from __future__ import annotations

import pytest

from hypertrain.scoring.delta_loss import score_delta_loss
from hypertrain.scoring.inputs import parse_delta, parse_trace
from hypertrain.scoring.slices import check_losses, combine, slice_bounds
from hypertrain.trainer.params import init_params
from tests.scoring.helpers import TRACE_ROWS, scoring_model, synthetic_delta, trace_bytes


def test_slice_bounds_cut_the_rows_in_order_and_never_empty() -> None:
    assert slice_bounds(12, 5) == [(0, 2), (2, 4), (4, 7), (7, 9), (9, 12)]
    assert slice_bounds(3, 3) == [(0, 1), (1, 2), (2, 3)]
    with pytest.raises(ValueError, match="non-empty"):
        slice_bounds(3, 4)


@pytest.mark.parametrize("slices", [1, 4, 5])
def test_the_combined_slices_are_the_unsliced_answer(slices: int) -> None:
    model = scoring_model()
    theta = init_params(model)
    delta = parse_delta(synthetic_delta(model), model)
    rows = parse_trace(trace_bytes(model), model)
    assert len(rows) == TRACE_ROWS
    whole = score_delta_loss(model, theta, delta, rows)
    parts = [score_delta_loss(model, theta, delta, rows[a:b]) for a, b in slice_bounds(12, slices)]
    assert combine([p["losses"] for p in parts]) == whole
    assert all(check_losses(p) == p["losses"] for p in parts)


def test_losses_that_do_not_give_back_the_answer_are_refused() -> None:
    model = scoring_model()
    rows = parse_trace(trace_bytes(model, rows=3), model)
    result = score_delta_loss(model, init_params(model), init_params(model), rows)
    with pytest.raises(ValueError, match="fingerprint"):
        check_losses({**result, "fingerprint": "00" * 32})
    with pytest.raises(ValueError, match="sequences"):
        check_losses({**result, "sequences": 4})
    with pytest.raises(ValueError, match="losses"):
        check_losses({**result, "losses": result["losses"][:-1]})
