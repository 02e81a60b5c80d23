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
  ``{w, tape_key, theta_hash, update_norm, clipped, opened}``, and ``note`` when there is one);
- :func:`final_offer`: what ``/inputs`` says of round ``w``'s finality (:class:`FinalOffer`:
  ``final``, ``finalize_template``, ``finalize_blocked``);
- :func:`final_retry_round`: the D at which to ask again about a round the server cannot
  finalise yet (its ``d_final`` while D is before it, else one ``max_poll`` later);
- :class:`FinalReport`: the one JSON line printed per finalised round (``{w, state: "FINAL",
  included, counts, verdicts}``, and ``note`` when it was found final already).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from attrs import frozen

from hypertrain.aggregator.step import MergeInputs, Step
from hypertrain.protocol.converter import structure
from hypertrain.protocol.errors import HypertrainError, Malformed
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.rounds.states import FAULT_STATUSES as FAULTS
from hypertrain.rounds.states import RoundState

__all__ = [
    "FINAL_STATES",
    "VERDICTS",
    "FinalOffer",
    "FinalReport",
    "KeyMismatch",
    "MergeReport",
    "Report",
    "RunFacts",
    "check_coord_key",
    "final_offer",
    "final_retry_round",
    "final_verdicts",
    "merge_inputs",
    "round_open_body",
    "round_open_of",
    "run_facts",
]


FINAL_STATES: Final = frozenset({RoundState.FINAL, RoundState.VESTING, RoundState.RELEASED})
"""The round states of the run view that mean a stored Finalize (spec 1.3)."""

VERDICTS: Final = ("MATCH", "UNSAMPLED", "FAULT", "TRANSIENT", "NO_UPLOAD")
"""The ledger verdicts of a final round (spec 8), in the order a :class:`FinalReport` counts
them; MATCH and UNSAMPLED are the included (paid) ones."""


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
    not_final: int | None = None
    """The oldest opened round that is not final; None when every opened round is (rounds are
    final in order, so every round before it is final)."""

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
    states = {int(r["w"]): str(r["state"]) for r in _field(view, "rounds", "run view")}
    config = view.get("config")
    total = None if not isinstance(config, Mapping) else config.get("total_rounds")
    return RunFacts(
        run_id=str(_field(view, "run_id", "run view")),
        status=str(_field(view, "status", "run view")),
        manifest=manifest,
        newest_round=max(states, default=None),
        total_rounds=None if total is None else int(total),
        not_final=min((w for w, s in states.items() if s not in FINAL_STATES), default=None),
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


@frozen
class FinalOffer:
    """What ``GET .../rounds/{w}/inputs`` says of round ``w``'s finality: it is ``final``, or
    the server accepts the Finalize body ``template`` now, or ``blocked`` says why not."""

    final: bool
    template: Mapping[str, Any] | None
    blocked: str | None


def final_offer(inputs: Mapping[str, Any]) -> FinalOffer:
    """The :class:`FinalOffer` of an ``/inputs`` answer; Malformed when it has none (a daemon
    without the finalize route)."""
    what = "inputs (a daemon without the finalize route? pass --no-finalize)"
    final = _field(inputs, "final", what)
    template = _field(inputs, "finalize_template", what)
    blocked = _field(inputs, "finalize_blocked", what)
    if not isinstance(final, bool) or not (template is None or isinstance(template, Mapping)):
        raise Malformed("inputs: final must be a bool and finalize_template an object or null")
    return FinalOffer(final, template, None if blocked is None else str(blocked))


def final_retry_round(inputs: Mapping[str, Any], *, period: float, max_poll: float) -> int:
    """The D at which to ask again about the round of ``inputs`` that cannot be final yet: its
    ``d_final`` while D is before it, else (audits, disputes or the previous round hold it
    back, and nothing says when they end) the first D at least ``max_poll`` seconds later."""
    now = int(_field(inputs, "now_round", "inputs"))
    d_final = int(round_open_of(inputs)["d_final"])
    if now < d_final:
        return d_final
    return now + max(1, math.ceil(max_poll / period))


def final_verdicts(view: Mapping[str, Any]) -> dict[str, str]:
    """``{hotkey: verdict}`` of a final round's view (its ``finalize.entries``)."""
    entries = _field(_field(view, "finalize", "round view"), "entries", "finalize")
    return {str(hotkey): str(entry["verdict"]) for hotkey, entry in entries.items()}


@frozen
class FinalReport:
    """One finalised round, as printed: ``state`` is ``"FINAL"``, ``included`` the number of
    miners paid for it (MATCH or UNSAMPLED), ``counts`` the number of each verdict
    (:data:`VERDICTS` order), ``verdicts`` each committed miner's by hotkey; ``note`` says when
    the round was found final already (by another aggregator, or by an earlier POST whose
    answer was lost)."""

    w: int
    state: str
    included: int
    counts: dict[str, int]
    verdicts: dict[str, str]
    note: str | None = None

    @classmethod
    def of(cls, w: int, verdicts: Mapping[str, str], note: str | None = None) -> FinalReport:
        ordered = dict(sorted(verdicts.items()))
        counts = {v: 0 for v in VERDICTS}
        for verdict in ordered.values():
            counts[verdict] = counts.get(verdict, 0) + 1
        paid = counts["MATCH"] + counts["UNSAMPLED"]
        return cls(w, "FINAL", paid, counts, ordered, note)


Report = MergeReport | FinalReport
"""What the ``report`` callback of :class:`~hypertrain.aggregator.remote.RemoteAggregator`
gets."""
