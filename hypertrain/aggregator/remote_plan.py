"""The pure decisions of ``hypertrain aggregate`` (the aggregator run from outside the daemon).

Everything here reads the daemon's JSON answers (spec 9) and returns values; no I/O:

- :func:`run_facts`: the run view ``GET /v1/runs/{id}`` as :class:`RunFacts` (the manifest,
  the newest round, ``total_rounds``, D);
- :func:`check_coord_key`: the key file must be the manifest's ``coord_pubkey``
  (:class:`KeyMismatch` otherwise);
- :func:`merge_inputs`: ``GET .../rounds/{w}/inputs`` as the
  :class:`~hypertrain.aggregator.step.MergeInputs` the daemon would read from its database:
  every ``UPLOADED`` miner with a DeltaManifest, by hotkey, and ``RoundOpen(w).theta_hash``;
- :func:`round_open_body`: RoundOpen(w + 1) as the daemon builds it: the server's
  ``next_round_template`` plus ``prev_final_hash = theta_hash = TH(theta')`` and the new
  state's ``outer_state_hash`` and ``center_hash``;
- :class:`MergeReport`: the one JSON line printed per merged round (the converter's JSON:
  ``{w, tape_key, theta_hash, update_norm, clipped, opened}``, and ``note`` when there is one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attrs import frozen

from hypertrain.aggregator.step import MergeInputs, Step
from hypertrain.protocol.converter import structure
from hypertrain.protocol.errors import HypertrainError, Malformed
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.rounds.states import FAULT_STATUSES as FAULTS

__all__ = [
    "KeyMismatch",
    "MergeReport",
    "RunFacts",
    "check_coord_key",
    "merge_inputs",
    "round_open_body",
    "round_open_of",
    "run_facts",
]


class KeyMismatch(HypertrainError):
    """The coordinator key file is not the run's K_coord."""


@frozen
class RunFacts:
    """What the aggregator needs of the run view."""

    run_id: str
    status: str
    manifest: RunManifest
    newest_round: int | None
    """The highest opened round; None before round 0 opens."""
    total_rounds: int | None

    @property
    def running(self) -> bool:
        return self.status == "running"

    def is_last(self, w: int) -> bool:
        """Whether round ``w`` is the run's last one (no round ``w + 1`` opens after it)."""
        return self.total_rounds is not None and w + 1 >= self.total_rounds


def _field(data: Mapping[str, Any], name: str, what: str) -> Any:
    if not isinstance(data, Mapping) or name not in data:
        raise Malformed(f"{what}: missing {name!r}")
    return data[name]


def run_facts(view: Mapping[str, Any]) -> RunFacts:
    """The run view's facts (Malformed when it is not one)."""
    envelope = _field(view, "manifest_envelope", "run view")
    manifest = structure(RunManifest, _field(envelope, "body", "manifest envelope"))
    rounds = [int(r["w"]) for r in _field(view, "rounds", "run view")]
    config = view.get("config")
    total = None if not isinstance(config, Mapping) else config.get("total_rounds")
    return RunFacts(
        run_id=str(_field(view, "run_id", "run view")),
        status=str(_field(view, "status", "run view")),
        manifest=manifest,
        newest_round=max(rounds, default=None),
        total_rounds=None if total is None else int(total),
    )


def check_coord_key(manifest: RunManifest, coord: Keypair) -> None:
    """KeyMismatch unless ``coord`` is the manifest's ``coord_pubkey``."""
    if coord.ss58 != manifest.coord_pubkey:
        raise KeyMismatch(
            f"the coordinator key file is {coord.ss58}, but the run's manifest names"
            f" coord_pubkey {manifest.coord_pubkey}: use the run's K_coord"
        )


def round_open_of(inputs: Mapping[str, Any]) -> Mapping[str, Any]:
    """The RoundOpen body of an ``/inputs`` answer."""
    body: Mapping[str, Any] = _field(_field(inputs, "round_open", "inputs"), "body", "round_open")
    return body


def merge_inputs(
    run: RunFacts, inputs: Mapping[str, Any], prev_state_key: str | None
) -> MergeInputs:
    """The merge inputs of an ``/inputs`` answer (module doc)."""
    w = int(_field(inputs, "w", "inputs"))
    uploads = []
    for miner in _field(inputs, "miners", "inputs"):
        posted = miner.get("delta_manifest")
        if miner.get("status") not in FAULTS and posted is not None:
            uploads.append((str(miner["hotkey"]), str(posted["body"]["delta_hash"])))
    return MergeInputs(
        run_id=run.run_id,
        w=w,
        manifest=run.manifest,
        theta_hash=str(round_open_of(inputs)["theta_hash"]),
        prev_state_key=prev_state_key,
        uploads=tuple(sorted(uploads)),
    )


def round_open_body(template: Mapping[str, Any], step: Step) -> dict[str, Any]:
    """RoundOpen(w + 1) as JSON: the server's template plus the step's state hashes."""
    return {
        **template,
        "prev_final_hash": step.theta_hash,
        "theta_hash": step.theta_hash,
        "outer_state_hash": step.outer_state_hash,
        "center_hash": step.center_hash,
    }


@frozen
class MergeReport:
    """One merged round, as printed: ``opened`` is round ``w + 1``, or None for the last round;
    ``note`` says when round ``w + 1`` was already open (opened by this key earlier, or by
    someone else)."""

    w: int
    tape_key: str
    theta_hash: str
    update_norm: float
    clipped: int
    opened: int | None
    note: str | None = None

    @classmethod
    def of(cls, step: Step, opened: int | None, note: str | None = None) -> MergeReport:
        return cls(
            step.w,
            step.tape_key,
            step.theta_hash,
            step.update_norm,
            step.clipped,
            opened,
            note,
        )
