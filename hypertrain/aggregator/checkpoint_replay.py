"""Replay a checkpoint's tapes from stored objects (the replay half of :mod:`.checkpoint_verify`).

:func:`replay_lineage` re-runs each signed tape of a lineage in order, with the tape's own
params, and reports every failure as a named :class:`Failure` (the names are listed in
:mod:`.checkpoint_verify`'s docstring: ``object:<sha256>``, ``genesis``, ``replay[w=N]``,
``replay.model``). Promises:

- every object a tape reads is loaded once and hash-checked before use: its ``prev_state``
  (unless it is the previous tape's output, which is the replayed state, never loaded) and its
  input deltas; an object that cannot be had fails ``object:<sha256>`` naming the tape and field;
- at most one round's deltas are held at a time, and replay stops after the first round that
  fails (later rounds build on it);
- when every round replays and the model file parsed, the replayed theta must be the file's,
  bit for bit, and ``model_bytes`` of it the file's bytes.

Pure: ``load_object(key) -> bytes`` is the caller's; NotFound (or KeyError, a dict's
``__getitem__``) is a missing object, anything else it raises propagates.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import numpy as np
from attrs import frozen

from hypertrain.aggregator.checkpoint import ModelFile, model_bytes
from hypertrain.aggregator.merge import Params, UnsupportedOuterOpt
from hypertrain.aggregator.outerstate import OuterState, pack_outer, unpack_outer
from hypertrain.aggregator.tape import SignedTape
from hypertrain.aggregator.tape_replay import TapeMismatch, replay_tape
from hypertrain.protocol.errors import NotFound, ProtocolError
from hypertrain.trainer.params import init_state_hash

__all__ = ["Failure", "Failures", "LoadObject", "ReplayOutcome", "replay_lineage"]

LoadObject = Callable[[str], bytes]
_SHOWN: Final = 3
"""How many items a failure's detail lists before ``(+N more)``."""


@frozen
class Failure:
    """A failed check: its name and what is wrong, in one line."""

    check: str
    detail: str


class Failures(list[Failure]):
    """The failures found so far, in check order."""

    def add(self, check: str, detail: str) -> None:
        """Add one, its detail folded onto one line."""
        self.append(Failure(check, " ".join(detail.split())))

    def add_all(self, check: str, problems: Sequence[str]) -> None:
        """Add one failure listing ``problems`` (the first few), if there are any."""
        if problems:
            more = f" (+{len(problems) - _SHOWN} more)" if len(problems) > _SHOWN else ""
            self.add(check, "; ".join(problems[:_SHOWN]) + more)


@frozen
class ReplayOutcome:
    """How far a replay got: ``rounds`` replayed exactly, and whether it started from the
    checked genesis state."""

    rounds: int
    genesis: bool


def _zero(tensors: Mapping[str, np.ndarray[Any, Any]]) -> bool:
    return not any(np.ascontiguousarray(a, dtype="<f4").view("<u4").any() for a in tensors.values())


def _genesis_problem(blob: bytes, model: ModelFile | None) -> str | None:
    try:
        state = unpack_outer(blob)
    except ProtocolError as e:
        return f"the first prev_state does not unpack: {e.detail}"
    if not (_zero(state.u) and _zero(state.center)):
        return "the first prev_state's u or center is not zero"
    if model is not None and state.theta_hash() != init_state_hash(model.model):
        return "the first prev_state's theta is not the model's init (init_params)"
    return None


def _load_round(
    tape: SignedTape, held: tuple[str, bytes] | None, load_object: LoadObject, out: Failures
) -> dict[str, bytes] | None:
    """The objects ``tape`` reads, by key, or None when one cannot be had (failures added)."""
    body = tape.body
    objects: dict[str, bytes] = {}
    needed = {}
    if held is not None and held[0] == body.prev_state:
        objects[held[0]] = held[1]
    else:
        needed[body.prev_state] = "prev_state"
    for index, item in enumerate(body.inputs):
        needed.setdefault(item.object, f"inputs[{index}].object ({item.id})")
    ok = True
    for key, field in needed.items():
        where = f"tape w={body.w} {field}"
        try:
            data = load_object(key)
        except NotFound as e:
            out.add(f"object:{key}", f"{where}: not found ({e.detail})")
        except KeyError:
            out.add(f"object:{key}", f"{where}: not found")
        else:
            got = hashlib.sha256(data).hexdigest()
            if got == key:
                objects[key] = data
                continue
            out.add(f"object:{key}", f"{where}: the bytes hash to {got}")
        ok = False
    return objects if ok else None


def _replay_round(
    tape: SignedTape, signer: str, objects: dict[str, bytes], out: Failures
) -> OuterState | None:
    check = f"replay[w={tape.body.w}]"
    try:
        params = Params.from_outer(tape.body.params)
        report = replay_tape(
            tape, coord_ss58=signer, load_object=objects.__getitem__, outer_params=params
        )
    except TapeMismatch as e:
        out.add(check, f"{e.field}: {e.detail}")
        return None
    except (ProtocolError, UnsupportedOuterOpt) as e:
        out.add(check, f"{type(e).__name__}: {e.detail}")
        return None
    if report.out_state != tape.body.out_state:
        out.add(check, f"out_state: the replayed state is {report.out_state}")
        return None
    return report.state


def _model_problem(
    theta: Mapping[str, np.ndarray[Any, Any]], model: ModelFile, model_file: bytes | None
) -> str | None:
    if sorted(theta) != sorted(model.theta):
        return "the replayed theta's tensor names are not the model file's"
    for name in sorted(theta):
        mine = np.ascontiguousarray(theta[name], dtype="<f4").view("<u4")
        theirs = np.ascontiguousarray(model.theta[name], dtype="<f4").view("<u4")
        if mine.shape != theirs.shape:
            return f"tensor {name!r} has shape {theirs.shape}, the replayed one {mine.shape}"
        if not np.array_equal(mine, theirs):
            count = int(np.count_nonzero(mine != theirs))
            return f"tensor {name!r} differs from the replayed theta in {count} elements"
    try:
        again = model_bytes(theta, model.model, model.run_id, model.w)
    except ProtocolError as e:
        return f"model_bytes of the replayed theta: {e.detail}"
    if again != model_file:
        return "the file is not model_bytes(replayed theta) byte for byte"
    return None


def replay_lineage(
    tapes: Sequence[SignedTape],
    signer: str,
    load_object: LoadObject,
    model: ModelFile | None,
    model_file: bytes | None,
    out: Failures,
) -> ReplayOutcome:
    """Replay ``tapes`` (signed by ``signer``), adding each failure to ``out`` (module doc).

    ``model`` and ``model_file``: the parsed model file and its bytes, or None when it did not
    parse (``genesis`` then checks only zero ``u`` and ``center``; no ``replay.model``).
    """
    held: tuple[str, bytes] | None = None
    state: OuterState | None = None
    genesis, replayed = False, 0
    for index, tape in enumerate(tapes):
        objects = _load_round(tape, held, load_object, out)
        if objects is None:
            break
        if index == 0 and tape.body.w == 0:
            problem = _genesis_problem(objects[tape.body.prev_state], model)
            if problem is not None:
                out.add("genesis", problem)
            genesis = problem is None
        state = _replay_round(tape, signer, objects, out)
        del objects
        if state is None:
            break
        held = (tape.body.out_state, pack_outer(state))
        replayed += 1
    if replayed == len(tapes) and state is not None and model is not None:
        problem = _model_problem(state.theta, model, model_file)
        if problem is not None:
            out.add("replay.model", problem)
    return ReplayOutcome(rounds=replayed, genesis=genesis)
