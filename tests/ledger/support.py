"""Helpers shared by the ledger tests: small params, whole rounds, answers as dicts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hypertrain.ledger import Ledger, LedgerParams, Verdict
from hypertrain.ledger.canonical import canonical_bytes, sha256_hex

GENESIS = 1_000
EPOCH = 100
RUN = "run-1"


def make_params(**overrides: Any) -> LedgerParams:
    """Epochs of 100 s from t=1000, one epoch per round, vesting after 2 rounds."""
    fields: dict[str, Any] = {
        "challenge_slug": "hypertrain",
        "genesis_unix": GENESIS,
        "epoch_seconds": EPOCH,
        "epochs_per_round": 1,
        "vest_rounds": 2,
        "forgive_per_epoch": 1,
    }
    fields.update(overrides)
    return LedgerParams(**fields)


def epoch_at(params: LedgerParams, epoch: int) -> int:
    """The route's default ``epoch_at``: the end of ``epoch``."""
    return params.genesis_unix + (epoch + 1) * params.epoch_seconds


Outcome = tuple[Verdict, int, int]
"""``(verdict, tokens, soft_score_ppm)``."""


def play_round(
    ledger: Ledger, w: int, outcomes: Mapping[str, Outcome], at: int, run_id: str = RUN
) -> int:
    """Commit, judge and finalize round ``w`` at time ``at``; its final round."""
    for hotkey in outcomes:
        ledger.commit(run_id, w, hotkey, ledger.event_time(at))
    for hotkey, (verdict, tokens, ppm) in outcomes.items():
        ledger.verdict(run_id, w, hotkey, verdict, tokens, ppm, ledger.event_time(at))
    return ledger.finalize(run_id, w, ledger.event_time(at))


def equal_round(*hotkeys: str, verdict: Verdict = "MATCH") -> dict[str, Outcome]:
    return {hotkey: (verdict, 100, 0) for hotkey in hotkeys}


def weights_of(ledger: Ledger, epoch: int, computed_at: int = 0) -> dict[str, Any]:
    """The answer for ``epoch`` (at the route's default ``epoch_at``), parsed."""
    data = ledger.get_weights(epoch, epoch_at(ledger.params, epoch), computed_at)
    answer = json.loads(data)
    assert isinstance(answer, dict)
    return answer


def journal_lines(state_dir: Path) -> list[dict[str, Any]]:
    path = state_dir / "ledger" / "journal.jsonl"
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def rechain(records: list[dict[str, Any]]) -> bytes:
    """The journal bytes of ``records`` with seq, prev_hash and hash recomputed (a forger's
    journal: a valid chain whatever the records say)."""
    out = []
    prev = "0" * 64
    for seq, record in enumerate(records):
        body = {k: v for k, v in record.items() if k != "hash"}
        body.update(seq=seq, prev_hash=prev)
        prev = sha256_hex(canonical_bytes(body))
        out.append(canonical_bytes({**body, "hash": prev}) + b"\n")
    return b"".join(out)
