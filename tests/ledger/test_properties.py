"""Random sequences of calls, valid and not: the rules refuse without changing anything, the
books always balance, answers never change, a reopen replays to the very same state, and an
answer sees exactly the events up to its ``epoch_at``."""

from __future__ import annotations

import copy
import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hypertrain.ledger import (
    UNIT,
    VERDICTS,
    Ledger,
    LedgerParams,
    LedgerRefused,
    LedgerState,
    journal_path,
    verify_journal,
)
from tests.ledger.support import make_params

RUNS = ("r1", "r2")
HOTKEYS = ("a", "b", "c", "d")

_dt = st.sampled_from([0, 1, 30, 100, 250])
_raw = st.booleans()  # True: the clock as is, which may break the time rules
_aim = st.booleans()  # True: a target the rules may accept; False: any (mostly refused)
_pick = st.integers(0, 50)
_run = st.sampled_from(RUNS)
_hotkey = st.sampled_from(HOTKEYS)
_outcome = st.tuples(
    st.sampled_from(VERDICTS), st.integers(0, 5), st.sampled_from([-1, 0, 400_000, 10**6, 2**40])
)
_commit = st.tuples(st.just("commit"), _run, st.integers(-1, 2), _hotkey, _dt, _raw)
_ops = st.one_of(
    _commit,
    _commit,
    st.tuples(st.just("verdict"), _pick, _aim, _outcome, _dt, _raw),
    st.tuples(st.just("close"), _run, st.lists(_outcome, min_size=4, max_size=4)),
    st.tuples(st.just("round"), _run, st.lists(_outcome, min_size=4, max_size=4), _dt),
    st.tuples(st.just("round"), _run, st.lists(_outcome, min_size=4, max_size=4), _dt),
    st.tuples(st.just("finalize"), _run, st.integers(-1, 1), _dt, _raw),
    st.tuples(st.just("clawback"), _hotkey, st.integers(1, 400_000), _dt, _raw),
    st.tuples(st.sampled_from(["vindicate", "fault"]), _pick, _aim, _dt, _raw),
    st.tuples(st.just("weights"), st.integers(-2, 2), st.integers(-150, 250), st.integers(0, 9)),
)
_events = _ops.filter(lambda op: op[0] != "weights")
_params = st.builds(
    make_params,
    epochs_per_round=st.sampled_from([1, 2]),
    vest_rounds=st.sampled_from([0, 1, 2]),
    forgive_per_epoch=st.sampled_from([0, 1]),
    max_entries=st.sampled_from([1, 2, 65_536]),
)
_SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@contextmanager
def state_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


class Driver:
    """Runs ops against a ledger and checks what must hold after each."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.clock = ledger.params.genesis_unix - 50
        self.answers: dict[int, bytes] = {}

    def at(self, dt: int, raw: bool) -> int:
        self.clock += dt
        return self.clock if raw else self.ledger.event_time(self.clock)

    def run(self, op: tuple[Any, ...]) -> None:
        ledger = self.ledger
        before = copy.deepcopy(ledger.state)
        size = ledger.path.stat().st_size
        try:
            self._do(op)
        except LedgerRefused:
            assert ledger.state == before
            assert ledger.path.stat().st_size == size
        self.check()

    def next_round(self, run: str) -> int:
        return next(w for w in range(1000) if not self.ledger.is_finalized(run, w))

    def targets(self, pick: int, aim: bool, wanted: str | None) -> tuple[str, int, str]:
        """``(run, w, hotkey)``: with ``aim``, one whose verdict is ``wanted`` (None: a commit
        still without a verdict), if there is one; otherwise any, from ``pick``."""
        book = self.ledger.state.book
        found = sorted(
            (run, w, hotkey)
            for (run, w), verdicts in book.rounds.items()
            for hotkey, verdict in verdicts.items()
            if verdict == wanted and book.is_finalized(run, w) == (wanted is not None)
        )
        if aim and found:
            return found[pick % len(found)]
        return RUNS[pick % 2], pick % 3, HOTKEYS[pick % 4]

    def _do(self, op: tuple[Any, ...]) -> None:
        ledger, kind = self.ledger, op[0]
        if kind == "commit":
            _, run, step, hotkey, dt, raw = op
            ledger.commit(run, max(0, self.next_round(run) + step), hotkey, self.at(dt, raw))
        elif kind == "verdict":
            _, pick, aim, (verdict, tokens, ppm), dt, raw = op
            run, w, hotkey = self.targets(pick, aim, None)
            ledger.verdict(run, w, hotkey, verdict, tokens, ppm, self.at(dt, raw))
        elif kind == "round":  # a whole round: every hotkey commits, then "close"
            _, run, outcomes, dt = op
            w = self.next_round(run)
            for hotkey in HOTKEYS:
                if not ledger.has_commit(run, w, hotkey):
                    ledger.commit(run, w, hotkey, self.at(dt, False))
            self._do(("close", run, outcomes))
        elif kind == "close":  # the missing verdicts of the run's next round, then finalize
            _, run, outcomes = op
            w = self.next_round(run)
            for hotkey, (verdict, tokens, ppm) in zip(HOTKEYS, outcomes, strict=True):
                if ledger.has_commit(run, w, hotkey) and not ledger.has_verdict(run, w, hotkey):
                    ledger.verdict(run, w, hotkey, verdict, tokens, ppm, self.at(1, False))
            ledger.finalize(run, w, self.at(1, False))
        elif kind == "finalize":
            _, run, step, dt, raw = op
            ledger.finalize(run, max(0, self.next_round(run) + step), self.at(dt, raw))
        elif kind == "clawback":
            _, hotkey, units, dt, raw = op
            burned, debt = ledger.clawback(hotkey, units, self.at(dt, raw))
            assert burned + debt == units
        elif kind in ("vindicate", "fault"):
            _, pick, aim, dt, raw = op
            run, w, hotkey = self.targets(pick, aim, "NO_UPLOAD")
            getattr(ledger, kind)(run, w, hotkey, self.at(dt, raw))
        else:
            _, epoch_step, at_step, computed_at = op
            last = ledger.last_answered
            epoch = max(0, (last[0] if last else 0) + epoch_step)
            epoch_at = max(0, self.clock + at_step)
            data = ledger.get_weights(epoch, epoch_at, computed_at)
            assert self.answers.setdefault(epoch, data) == data
            self.check_answer(data)

    def check(self) -> None:
        state = self.ledger.state
        state.accounts.check_balance()
        state.projected().audit()
        totals = self.ledger.totals()
        assert totals.minted == totals.burned + totals.paid + totals.pending
        for epoch, data in self.answers.items():
            assert self.ledger.get_weights(epoch, 0, 0) == data

    def check_answer(self, data: bytes) -> None:
        answer = json.loads(data)
        meta = answer["metadata"]
        assert sum(answer["weights"].values()) == meta["units_paid"] <= UNIT
        assert meta["units_paid"] + meta["units_burned_this_epoch"] == UNIT
        assert len(answer["weights"]) <= self.ledger.params.max_entries
        assert meta["ledger_minted"] == (
            meta["ledger_burned"] + meta["ledger_paid"] + meta["ledger_pending"]
        )
        assert meta["reason"] in ("paid", "nothing_vested", "out_of_order")
        assert (meta["reason"] == "paid") == (meta["units_paid"] > 0)


@_SETTINGS
@given(_params, st.lists(_ops, min_size=10, max_size=60))
def test_random_calls_keep_every_promise(params: LedgerParams, ops: list[tuple[Any, ...]]) -> None:
    with state_dir() as root:
        with Ledger.open(root, params) as ledger:
            driver = Driver(ledger)
            for op in ops:
                driver.run(op)
            live = ledger.state
        with Ledger.open(root, params) as reopened:
            assert reopened.state == live
            for epoch, data in driver.answers.items():
                assert reopened.get_weights(epoch, 0, 0) == data
        report = verify_journal(journal_path(root))
        assert report.ok
        assert report.totals == live.totals()


@_SETTINGS
@given(_params, st.lists(_events, min_size=5, max_size=40), st.data())
def test_an_answer_sees_exactly_the_events_up_to_its_epoch_at(
    params: LedgerParams, ops: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    with state_dir() as root, Ledger.open(root, params) as ledger:
        driver = Driver(ledger)
        for op in ops:
            driver.run(op)
        events = list(ledger.state.queue)  # no answer yet: every event is still queued
    cut = data.draw(st.integers(params.genesis_unix - 60, driver.clock + 10), label="epoch_at")
    everything, prefix = LedgerState.new(params), LedgerState.new(params)
    for event in events:
        assert everything.check(event)
        everything.record(event)
        if event.at <= cut:
            assert prefix.check(event)
            prefix.record(event)
    seen = everything.prepare_answer(3, cut, 0)
    alone = prefix.prepare_answer(3, cut, 0)
    assert not isinstance(seen, bytes)
    assert not isinstance(alone, bytes)
    assert seen.data == alone.data
    assert seen.payments == alone.payments
