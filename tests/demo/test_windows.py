"""The demo's windows follow its measured training round: the CPU shared by M miners and the
demo's other processes on C cores, twice that to spare, the fixed overhead, the floors; and the
``--train-seconds`` override."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypertrain.demo.main import DemoOptions, build_parser
from hypertrain.demo.windows import (
    ASSIGN_AFTER_OPEN,
    FINAL_AFTER_UPLOAD,
    SAFETY,
    TRAIN_FLOOR,
    TRAIN_OVERHEAD_SECONDS,
    UPLOAD_FLOOR,
    Windows,
    size_windows,
)


def test_a_quick_round_on_enough_cores_gets_the_floors() -> None:
    got = size_windows(0.0, trainers=1, others=0, cores=1)
    assert got == Windows(0.0, 1.0, TRAIN_FLOOR, UPLOAD_FLOOR, 1)
    assert (got.assign_after_open, got.final_after_upload) == (1, 1)
    assert got.round_seconds == 1 + TRAIN_FLOOR + UPLOAD_FLOOR


def test_miners_sharing_few_cores_stretch_the_training_window() -> None:
    # 4 miners + 4 others on 2 cores: each trains at a quarter of a core.
    shared = size_windows(0.5, trainers=4, others=4, cores=2)
    assert shared.stretch == 4.0
    assert shared.train_rounds == math.ceil(2.0 * 0.5 * 4.0 + 1.5) == 6
    assert shared.upload_after_commit == 3  # half the training window, rounded up
    assert shared.round_seconds == 1 + 6 + 3
    # The same on 16 cores: nobody waits for a core; 2 * 0.5 + 1.5 = 2.5 -> 3.
    alone = size_windows(0.5, trainers=4, others=4, cores=16)
    assert (alone.stretch, alone.train_rounds, alone.upload_after_commit) == (1.0, 3, 2)


def test_windows_are_whole_drand_rounds_of_the_period() -> None:
    got = size_windows(0.5, trainers=4, others=4, cores=2, period=3)  # 5.5 s -> 2 rounds
    assert (got.train_rounds, got.upload_after_commit, got.period) == (2, 2, 3)
    assert got.round_seconds == (1 + 2 + 2) * 3


@given(
    seconds=st.floats(0, 600, allow_nan=False),
    trainers=st.integers(1, 64),
    others=st.integers(0, 64),
    cores=st.integers(1, 256),
    period=st.integers(1, 30),
)
def test_the_training_window_covers_the_shared_round_twice_and_the_overhead(
    seconds: float, trainers: int, others: int, cores: int, period: int
) -> None:
    got = size_windows(seconds, trainers=trainers, others=others, cores=cores, period=period)
    share = min(1.0, cores / (trainers + others))  # of a core, for each busy process
    assert got.train_rounds * period >= SAFETY * seconds / share + TRAIN_OVERHEAD_SECONDS - 1e-9
    assert got.train_rounds >= TRAIN_FLOOR
    assert got.upload_after_commit >= max(UPLOAD_FLOOR, got.train_rounds / 2)
    more = size_windows(seconds, trainers=trainers + 1, others=others, cores=cores, period=period)
    assert more.train_rounds >= got.train_rounds  # another miner never shortens a window


@pytest.mark.parametrize(
    "bad",
    [
        {"train_seconds": -0.1},
        {"train_seconds": math.inf},
        {"train_seconds": math.nan},
        {"trainers": 0},
        {"cores": 0},
        {"period": 0},
        {"others": -1},
    ],
)
def test_nonsense_is_refused(bad: dict[str, float]) -> None:
    args: dict[str, float] = {"train_seconds": 1.0, "trainers": 1, "others": 0, "cores": 1}
    with pytest.raises(ValueError, match=r"must be|need"):
        size_windows(**(args | bad))  # type: ignore[arg-type]


def test_the_line_says_the_measurement_and_the_windows() -> None:
    got = size_windows(0.3125, trainers=4, others=4, cores=2)
    assert got.line("measured") == (
        "demo: one training round measured 0.31 s; windows for 4.0x that (the CPU shared),"
        " x2 to spare: assign 1, train 4, upload 2 rounds of 1 s (7 s a round plus the merge)"
    )


def test_the_options_count_every_training_miner_and_every_auditor() -> None:
    options = DemoOptions(miners=3, honeypots=("fabricate", "noise"), auditors=1, dispute=True)
    assert (options.trainers, options.n_auditors) == (3 + 2 + 1, 2)
    assert (DemoOptions().trainers, DemoOptions().n_auditors) == (4, 1)
    assert (ASSIGN_AFTER_OPEN, FINAL_AFTER_UPLOAD) == (1, 1)  # the protocol's minimum


def test_train_seconds_overrides_the_measurement() -> None:
    assert build_parser().parse_args(["--train-seconds", "2.5"]).train_seconds == 2.5
    assert build_parser().parse_args([]).train_seconds is None
    for bad in ("0", "-1", "abc", "nan", "1e9"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--train-seconds", bad])
