"""Verify a ``ht-ckpt-v1`` checkpoint (spec 7, :mod:`.checkpoint`), and optionally replay it.

:func:`check_checkpoint` takes the directory's files by name (and the names of any entries
that are not regular files) and runs every check below that it can, collecting each failure
as a named :class:`Failure` instead of stopping at the first. A check that reads a part which
did not parse (or is missing) is skipped, neither passed nor failed; the part's own failure
says why. The checks, in order:

    files               the entries are exactly ``FILES``, each a regular file
    manifest            MANIFEST.json parses as ``SignedCheckpoint``
    license, dataset    also failed when the manifest fails in ``body.license``/``body.dataset``
    signature           the manifest's signature verifies for its signer
    signer              the signer is the expected one (when one is given)
    status              ``final`` (a provisional checkpoint fails here)
    hash:<file>         sha256 of lineage.json and model.safetensors equal ``body.files``
    lineage             lineage.json parses as ``Lineage``
    lineage.signature   every tape is signed by the manifest's signer and verifies
    lineage.run         every tape is of the manifest's run
    lineage.rounds      the tapes' rounds are consecutive
    lineage.chain       each tape's prev_state/prev_theta_hash are the previous one's
                        out_state/theta_hash
    rounds, theta_hash, included
                        ``body.rounds`` is [first w, last w], ``body.theta_hash`` the last tape's,
                        ``body.included`` is ``included_of(tapes)``
    model               model.safetensors parses; its run_id and w are the manifest's run and
                        w_end, and ``TH(theta) == body.theta_hash``

:func:`replay_checkpoint` then re-runs the merges (:mod:`.checkpoint_replay`; skipped when the
manifest or the lineage did not parse, or a tape is not the signer's): for each tape in lineage
order it loads (and hash-checks) every object the tape reads, its ``prev_state`` and its input
deltas (the ``prev_state`` of a tape that follows the previous one is that tape's replayed
output, never loaded), and runs :func:`~.tape_replay.replay_tape` with the tape's own signed
params:

    object:<sha256>     the object cannot be loaded (NotFound) or its bytes do not hash to the
                        key; the detail names the tape and field that needs it
    genesis             (lineage starting at w = 0) the first prev_state unpacks, with zero ``u``
                        and ``center``, and its theta is the model's init (``init_params``)
    replay[w=N]         round N does not replay: ``TapeMismatch.field`` and its message
    replay.model        the replayed final theta is the model file's, tensor by tensor bit for
                        bit, and ``model_bytes`` of it is the model file, byte for byte

Replay stops after the first round that fails (later rounds build on it) and holds one round's
deltas at a time. What a replay cannot show: the tapes' params are their own (a checkpoint
carries no run manifest to hold them against), and a lineage starting after w = 0 replays from
the stored state its first tape names.

:meth:`Checked.report` gives the :class:`CheckpointReport` or raises :class:`CheckpointInvalid`
with every failure. Pure: no trio, httpx or quart; ``load_object(key) -> bytes`` is the caller's
and raises NotFound (or KeyError: a dict's ``__getitem__``) for a missing key; anything else it
raises (an unreachable daemon) propagates.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
from attrs import frozen

from hypertrain.aggregator.checkpoint import (
    FILES,
    HASHED_FILES,
    LINEAGE_FILE,
    MANIFEST_FILE,
    MODEL_FILE,
    DatasetInfo,
    Lineage,
    ModelFile,
    SignedCheckpoint,
    included_of,
    parse_lineage,
    parse_manifest,
    read_model,
    verify_manifest_signature,
)
from hypertrain.aggregator.checkpoint_replay import Failure, Failures, LoadObject, replay_lineage
from hypertrain.aggregator.tape import verify_tape
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.errors import ContractMismatch, ProtocolError

__all__ = [
    "Checked",
    "CheckpointInvalid",
    "CheckpointReport",
    "Failure",
    "LoadObject",
    "check_checkpoint",
    "replay_checkpoint",
    "verify_checkpoint",
]

T = TypeVar("T")


class CheckpointInvalid(ContractMismatch):
    """The checkpoint fails one or more checks; ``failures`` holds each, in check order."""

    def __init__(self, failures: Sequence[Failure]) -> None:
        super().__init__("; ".join(f"{f.check}: {f.detail}" for f in failures))
        self.failures = tuple(failures)

    @property
    def failed(self) -> list[str]:
        """The failed checks' names."""
        return [f.check for f in self.failures]


@frozen
class CheckpointReport:
    """A verified checkpoint: what it is of, and whether (and how far) it was replayed."""

    run_id: str
    rounds: tuple[int, int]
    theta_hash: str
    included: tuple[str, ...]
    license: str
    dataset: DatasetInfo
    signer: str
    status: str
    replayed: bool
    replayed_rounds: int
    genesis: bool
    """The replay started from the checked genesis state (w_start = 0)."""

    def to_json(self) -> dict[str, Any]:
        """``{"result": "VERIFIED", ...}``, JSON-ready."""
        return {"result": "VERIFIED", **unstructure(self)}


@frozen(eq=False)
class Checked:
    """What the checks parsed and found; :meth:`report` turns it into the verdict."""

    manifest: SignedCheckpoint | None
    lineage: Lineage | None
    model: ModelFile | None
    model_file: bytes | None
    failures: tuple[Failure, ...]
    replayed: bool = False
    replayed_rounds: int = 0
    genesis: bool = False

    def failed(self, *checks: str) -> bool:
        """Whether any of ``checks`` failed."""
        return any(f.check in checks for f in self.failures)

    def report(self) -> CheckpointReport:
        """The report; CheckpointInvalid when any check failed."""
        if self.failures or self.manifest is None:
            raise CheckpointInvalid(self.failures or (Failure("manifest", "not checked"),))
        body = self.manifest.body
        return CheckpointReport(
            run_id=body.run_id,
            rounds=body.rounds,
            theta_hash=body.theta_hash,
            included=body.included,
            license=body.license,
            dataset=body.dataset,
            signer=self.manifest.signer,
            status=body.status,
            replayed=self.replayed,
            replayed_rounds=self.replayed_rounds,
            genesis=self.genesis,
        )


def _check_files(files: Mapping[str, bytes], others: Mapping[str, str], out: Failures) -> None:
    missing = [name for name in FILES if name not in files]
    extra = [f"{name} ({others.get(name, 'a regular file')})" for name in sorted(others)]
    extra += [name for name in sorted(files) if name not in FILES]
    problems = ([f"missing {', '.join(missing)}"] if missing else []) + (
        [f"extra {', '.join(extra)}"] if extra else []
    )
    if problems:
        out.add("files", f"must be exactly {', '.join(FILES)}: {'; '.join(problems)}")


def _parsed(check: str, parse: Callable[[bytes], T], data: bytes | None, out: Failures) -> T | None:
    """``parse(data)``, or None when the file is missing or fails ``check`` (added to ``out``)."""
    if data is None:
        return None
    try:
        return parse(data)
    except ProtocolError as e:
        out.add(check, e.detail)
        if check == "manifest":
            for name in ("license", "dataset"):
                if f"$.body.{name}" in e.detail:
                    out.add(name, f"invalid in the manifest: {e.detail}")
        return None


def _check_manifest(
    manifest: SignedCheckpoint, files: Mapping[str, bytes], signer: str | None, out: Failures
) -> None:
    try:
        verify_manifest_signature(manifest)
    except ProtocolError as e:
        out.add("signature", e.detail)
    if signer is not None and manifest.signer != signer:
        out.add("signer", f"signed by {manifest.signer}, expected {signer}")
    if manifest.body.status != "final":
        out.add("status", f"the checkpoint is {manifest.body.status}, not final")
    for name in HASHED_FILES:
        if name in files:
            got = hashlib.sha256(files[name]).hexdigest()
            if got != manifest.body.files[name]:
                out.add(
                    f"hash:{name}", f"sha256 {got}, the manifest says {manifest.body.files[name]}"
                )


def _check_lineage(lineage: Lineage, manifest: SignedCheckpoint | None, out: Failures) -> None:
    tapes = [t.body for t in lineage.tapes]
    if manifest is not None:
        unsigned = []
        for tape in lineage.tapes:
            try:
                verify_tape(tape, coord_ss58=manifest.signer)
            except ProtocolError as e:
                unsigned.append(f"w={tape.body.w}: {e.detail}")
        out.add_all("lineage.signature", unsigned)
    run_id = manifest.body.run_id if manifest is not None else tapes[0].run_id
    out.add_all(
        "lineage.run", [f"w={t.w} is of run {t.run_id}" for t in tapes if t.run_id != run_id]
    )
    pairs = list(itertools.pairwise(tapes))
    out.add_all("lineage.rounds", [f"w={b.w} follows w={a.w}" for a, b in pairs if b.w != a.w + 1])
    broken = [
        f"w={b.w}'s {name} is not w={a.w}'s {prev}"
        for a, b in pairs
        for name, prev in (("prev_state", "out_state"), ("prev_theta_hash", "theta_hash"))
        if getattr(b, name) != getattr(a, prev)
    ]
    out.add_all("lineage.chain", broken)
    if manifest is None:
        return
    body, first, last = manifest.body, tapes[0], tapes[-1]
    if body.rounds != (first.w, last.w):
        out.add("rounds", f"the manifest says {list(body.rounds)}, the tapes [{first.w}, {last.w}]")
    if body.theta_hash != last.theta_hash:
        out.add(
            "theta_hash",
            f"the manifest says {body.theta_hash}, w={last.w}'s tape {last.theta_hash}",
        )
    included = included_of(lineage.tapes)
    if body.included != included:
        absent = sorted(set(included) - set(body.included))
        extra = sorted(set(body.included) - set(included))
        out.add(
            "included",
            f"not the tapes' inputs: missing {absent or 'none'}, extra {extra or 'none'}",
        )


def _check_model(
    data: bytes | None, manifest: SignedCheckpoint | None, out: Failures
) -> ModelFile | None:
    if data is None:
        return None
    try:
        model = read_model(data)
    except ProtocolError as e:
        out.add("model", e.detail)
        return None
    if manifest is not None:
        body = manifest.body
        problems = []
        if (model.run_id, model.w) != (body.run_id, body.rounds[1]):
            problems.append(
                f"metadata says run {model.run_id} w={model.w}, not w_end={body.rounds[1]}"
            )
        if model.theta_hash() != body.theta_hash:
            problems.append(f"TH(theta) {model.theta_hash()} is not theta_hash {body.theta_hash}")
        out.add_all("model", problems)
    return model


def check_checkpoint(
    files: Mapping[str, bytes],
    *,
    signer: str | None = None,
    others: Mapping[str, str] | None = None,
) -> Checked:
    """Every structural check on ``files`` (module docstring); never raises for bad files.

    ``others`` names the directory's entries that are not regular files (name -> what they are,
    e.g. ``"a directory"``): they fail ``files`` and are not read. ``signer``: the expected
    K_coord address.
    """
    out = Failures()
    _check_files(files, others or {}, out)
    manifest = _parsed("manifest", parse_manifest, files.get(MANIFEST_FILE), out)
    if manifest is not None:
        _check_manifest(manifest, files, signer, out)
    lineage = _parsed("lineage", parse_lineage, files.get(LINEAGE_FILE), out)
    if lineage is not None:
        _check_lineage(lineage, manifest, out)
    model_file = files.get(MODEL_FILE)
    model = _check_model(model_file, manifest, out)
    return Checked(manifest, lineage, model, model_file, tuple(out))


def replay_checkpoint(checked: Checked, load_object: LoadObject) -> Checked:
    """``checked`` with the replay's failures added and ``replayed`` set (module docstring)."""
    manifest, lineage = checked.manifest, checked.lineage
    if manifest is None or lineage is None or checked.failed("lineage.signature"):
        return checked
    out = Failures(checked.failures)
    outcome = replay_lineage(
        lineage.tapes, manifest.signer, load_object, checked.model, checked.model_file, out
    )
    return attrs.evolve(
        checked,
        failures=tuple(out),
        replayed=True,
        replayed_rounds=outcome.rounds,
        genesis=outcome.genesis,
    )


def verify_checkpoint(
    files: Mapping[str, bytes],
    *,
    signer: str | None = None,
    others: Mapping[str, str] | None = None,
    load_object: LoadObject | None = None,
) -> CheckpointReport:
    """Check ``files`` and, given ``load_object``, replay them; CheckpointInvalid lists every
    failed check."""
    checked = check_checkpoint(files, signer=signer, others=others)
    if load_object is not None:
        checked = replay_checkpoint(checked, load_object)
    return checked.report()
