"""Per-round artifacts under ``workdir/rounds/{w}/`` (spec/protocol.md section 5.5).

Files, each written with :func:`~hypertrain.miner.journal.write_durable` before the journal
event that depends on it::

    round_open.json   the verified RoundOpen body             (before "trained")
    samples.json      the assigned sample ids                 (before "trained")
    delta.bin         the ht-dense-int8-v1 payload            (before "trained")
    preimages.json    the LeafPreimage JSON list              (before "trained")
    final_state.bin   pack_state(theta_end, m, v, step)       (before "trained")
    ef_out.bin        pack_state(ef_out), theta section only  (before "trained")
    leaf_state_{k}.bin  pack_state(theta, m, v, step) at leaf k (before "trained"),
                      k = 0 .. H/J; only under state_policy = carry (segment audits)
    start_state.bin   pack_state(theta_start), the round start (before "trained");
                      only without leaf states (what a full-mode rerun replays from)
    commit.json       the sealed Commit envelope              (before "trained")
    receipt.json      the verified Receipt envelope           (before "committed")

Rounds older than ``E_vest_rounds + 2`` are deleted by :func:`prune`, leaf states with the rest
(finality does not exist yet: the states a segment audit asks for live as long as the round).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Final

from hypertrain.miner.journal import write_durable
from hypertrain.trainer.state import TrainState, unpack_state

__all__ = ["ROUNDS_DIR", "START_STATE_FILE", "RoundDir", "leaf_state_file", "prune"]

ROUNDS_DIR: Final = "rounds"
START_STATE_FILE: Final = "start_state.bin"
"""The round's start theta, kept when no leaf states are (a full-mode rerun starts there)."""


def _dump(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode() + b"\n"


def leaf_state_file(k: int) -> str:
    """The artifact name of the state at leaf ``k`` (inner step ``t = k * J``)."""
    return f"leaf_state_{k}.bin"


class RoundDir:
    """The artifact directory of round ``w``."""

    def __init__(self, workdir: Path, w: int) -> None:
        self.w = w
        self.path = workdir / ROUNDS_DIR / str(w)

    def exists(self, name: str) -> bool:
        return (self.path / name).is_file()

    def write_bytes(self, name: str, data: bytes) -> None:
        write_durable(self.path / name, data)

    def write_json(self, name: str, value: object) -> None:
        write_durable(self.path / name, _dump(value))

    def read_bytes(self, name: str) -> bytes:
        return (self.path / name).read_bytes()

    def read_json(self, name: str) -> Any:
        return json.loads(self.read_bytes(name))

    def read_state(self, name: str) -> TrainState:
        return unpack_state(self.read_bytes(name))


def prune(workdir: Path, current_w: int, keep_rounds: int) -> list[int]:
    """Delete the artifact dirs of rounds ``<= current_w - keep_rounds``; returns them."""
    root = workdir / ROUNDS_DIR
    if not root.is_dir():
        return []
    removed = []
    for child in root.iterdir():
        if child.name.isdigit() and int(child.name) <= current_w - keep_rounds:
            shutil.rmtree(child)
            removed.append(int(child.name))
    return sorted(removed)
