"""One global merge step from its inputs: the single implementation of spec 7's round merge.

Both aggregators run this code: the daemon's own service (inputs read from its database,
objects read from its store; :mod:`hypertrain.coordinator.flows.aggregation`) and ``hypertrain
aggregate`` on another machine (inputs from ``GET .../inputs``, objects over HTTP;
:mod:`hypertrain.aggregator.remote`). Promises:

- :func:`compute_step` is a function of :class:`MergeInputs`, the bytes ``fetch`` returns and
  K_coord: ed25519 signatures are deterministic, so both aggregators (or one recomputing after a
  crash) produce the same objects under the same keys, byte for byte;
- the previous OuterState is ``fetch(prev_state_key)``, or for ``w = 0`` the genesis state
  ``OuterState.genesis(init_params(manifest.model))``, whose ``TH(theta)`` must equal round 0's
  ``theta_hash`` (:class:`ContractMismatch` otherwise);
- a delta whose fetch raises :class:`NotFound` or :class:`Malformed`, or that does not fit the
  model, is *excluded* (named in the tape), never fatal; anything else ``fetch`` raises (a
  network error, a corrupt store) propagates; :func:`merge_blobs` can also be told ids to leave
  out whatever their blobs (a rollback's faulted miners, :mod:`.rollback`), named in the tape's
  ``excluded`` alike;
- :class:`Step` lists the objects to store: the previous OuterState blob (the tape names it),
  the new OuterState blob, the theta-only start state of round ``w + 1`` and the signed tape.

No I/O of its own: ``fetch(key) -> bytes`` is the caller's (an object store's ``get``, or an
HTTP download), and the computing half (:func:`merge_blobs`) runs in the caller's ``run_sync``
(the daemon: a worker thread with the real clock; see :mod:`nurseries` ``offload_for``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING

from attrs import frozen

from hypertrain.aggregator.merge import Params, aggregate_round, norm, validate_delta
from hypertrain.aggregator.outerstate import OuterState, pack_outer, state_key, unpack_outer
from hypertrain.aggregator.tape import build_tape_body, seal_tape, tape_bytes, tape_key
from hypertrain.protocol.errors import ContractMismatch, Malformed, NotFound
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.trainer.codec import F32Array, decode_payload
from hypertrain.trainer.params import init_params
from hypertrain.trainer.state import pack_state

if TYPE_CHECKING:
    from nurseries import RunSync

__all__ = ["Fetch", "MergeInputs", "Step", "compute_step", "genesis_state", "merge_blobs"]

log = logging.getLogger(__name__)

Fetch = Callable[[str], Awaitable[bytes]]
"""``fetch(sha256) -> bytes``: an object's verified content; NotFound when it is absent."""


@frozen
class MergeInputs:
    """Everything a merge of round ``w`` needs besides the objects (module doc)."""

    run_id: str
    w: int
    manifest: RunManifest
    theta_hash: str
    """``RoundOpen(w).theta_hash``: checked against the genesis state for ``w = 0``."""
    prev_state_key: str | None
    """The stored OuterState of round ``w - 1``; None for ``w = 0`` (genesis)."""
    uploads: tuple[tuple[str, str], ...]
    """``(hotkey, delta_hash)`` of every UPLOADED miner, by hotkey."""


@frozen(eq=False)
class Step:
    """A computed step: the objects to store and the facts the write records."""

    run_id: str
    w: int
    objects: tuple[bytes, ...]
    tape_key: str
    out_state: str
    theta_start_sha256: str
    theta_hash: str
    outer_state_hash: str
    center_hash: str
    update_norm: float
    clipped: int
    raise_q: tuple[str, ...] = ()
    """The copy screen's flagged miners (the tape's ``screens.raise_q``): audited at ``q = 1``
    in the round this step opens."""
    inputs: tuple[str, ...] = ()
    """The hotkeys whose deltas the tape merged (its ``inputs`` ids), sorted."""


def genesis_state(manifest: RunManifest, theta_hash: str) -> OuterState:
    """``OuterState.genesis(init_params(model))``; ContractMismatch unless its ``TH(theta)``
    is round 0's ``theta_hash``."""
    state = OuterState.genesis(init_params(manifest.model))
    if state.theta_hash() != theta_hash:
        raise ContractMismatch(
            f"genesis TH(theta) {state.theta_hash()} is not round 0's theta_hash {theta_hash}"
        )
    return state


async def compute_step(
    fetch: Fetch, inputs: MergeInputs, coord: Keypair, run_sync: RunSync
) -> Step:
    """Merge round ``inputs.w`` (module doc): fetch every blob, then compute in ``run_sync``
    (a worker thread in the daemon: seconds of CPU for a big model must not stop the loop)."""
    prev_blob = None if inputs.prev_state_key is None else await fetch(inputs.prev_state_key)
    blobs: list[tuple[str, bytes | None]] = []
    for hotkey, delta_hash in inputs.uploads:
        try:
            blobs.append((hotkey, await fetch(delta_hash)))
        except (NotFound, Malformed) as e:
            log.warning("round %d: excluding %s: %s", inputs.w, hotkey, e)
            blobs.append((hotkey, None))
    step: Step = await run_sync(merge_blobs, inputs, prev_blob, blobs, coord)
    return step


def merge_blobs(
    inputs: MergeInputs,
    prev_blob: bytes | None,
    blobs: Sequence[tuple[str, bytes | None]],
    coord: Keypair,
    *,
    excluded: Collection[str] = (),
) -> Step:
    """The computing half of :func:`compute_step` (pure): ``prev_blob`` None is the genesis
    state; a delta blob None (not found) or one that does not decode or fit is excluded, and so
    is every id in ``excluded`` without its blob being looked at (it needs none in ``blobs``)."""
    run_id, w = inputs.run_id, inputs.w
    if prev_blob is None:
        prev = genesis_state(inputs.manifest, inputs.theta_hash)
        prev_blob = pack_outer(prev)
    else:
        prev = unpack_outer(prev_blob)
    shapes = prev.shapes()
    deltas: dict[str, dict[str, F32Array]] = {}
    left_out = set(excluded)
    dropped: list[str] = list(left_out)
    for hotkey, blob in blobs:
        if hotkey in left_out:
            continue
        if blob is None:
            dropped.append(hotkey)
            continue
        try:
            delta = decode_payload(blob)
            validate_delta(hotkey, delta, shapes)
        except Malformed as e:
            log.warning("round %d: excluding %s: %s", w, hotkey, e)
            dropped.append(hotkey)
            continue
        deltas[hotkey] = delta
    params = Params.from_outer(inputs.manifest.outer)
    result = aggregate_round(prev, deltas, params, excluded=dropped)
    out = result.state_out
    out_blob = pack_outer(out)
    theta_blob = pack_state(out.theta)
    body = build_tape_body(
        run_id,
        w,
        params,
        state_key(prev_blob),
        prev,
        result,
        state_key(out_blob),
        dict(inputs.uploads),
        dropped,
    )
    signed = seal_tape(coord, body)
    return Step(
        run_id=run_id,
        w=w,
        objects=(prev_blob, out_blob, theta_blob, tape_bytes(signed)),
        tape_key=tape_key(signed),
        out_state=state_key(out_blob),
        theta_start_sha256=state_key(theta_blob),
        theta_hash=out.theta_hash(),
        outer_state_hash=out.outer_state_hash(),
        center_hash=out.center_hash(),
        update_norm=norm(result.g),
        clipped=len(result.preclipped),
        raise_q=body.screens.raise_q,
        inputs=tuple(item.id for item in body.inputs),
    )
