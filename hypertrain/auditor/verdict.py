"""From a checked job and its evidence to a verdict (spec 6.3), and the sealed ReplayVerdict.

Two phases, so the adapter fetches the dataset only when a replay is needed:

- :func:`prepare` runs the checks of :mod:`hypertrain.auditor.checks` in the spec's order and
  returns the :class:`Outcome` of the first that fails (BAD_PROOF, ASSIGNMENT_VIOLATION,
  WITHHELD; none replays, so ``recomputed_leaves_root = "0"*64`` and ``first_bad_leaf`` is
  null), or the :class:`Prepared` inputs of the replay. A needed serve missing while
  ``now_round <= serve_deadline`` (or ``now_round`` unknown) raises
  :class:`~hypertrain.auditor.errors.NotReady` (the job fails with retry). An ef_in that is
  neither named by the job nor TH(zeros) is a BAD_PROOF unless ``outer.ef_beta == 0``: then the
  payload does not depend on ef_in (``acc = 0*ef_in + delta`` rounds to ``delta``'s codes for
  any finite ef_in) and zeros are used.
- :func:`replay_outcome` replays and compares (MISMATCH or MATCH):

  - *(ours, cheap)* every preimage's ``rng_ctr`` is ``rng_ctr(run_id, w, t, -1)`` and leaf 0
    has loss and norm 0; in segments mode also leaf 0's committed theta stage hashes are TH of
    the public start state's stages (under ``carry`` a round starts from the published theta,
    so a fabricated start is caught even when window 0 is not drawn);
  - full mode: ``train_round`` from the public start over all H steps, every leaf compared;
    segments mode: each window ``[a, b]`` replayed from the served state at leaf ``a``, leaves
    ``a+1 .. b`` compared;
  - ``first_bad_leaf`` = the lowest leaf found wrong; ``recomputed_leaves_root`` = the Merkle
    root of the rebuilt digests (full: all leaves, segments: the replayed windows' leaves in
    window order);
  - when every leaf matches, the final window's theta must hash to ``final_theta_hash`` and
    ``compress(theta_start - theta_end, ef_in, ef_beta)`` must hash to ``delta_hash`` (and be
    ``delta_bytes`` long); a difference is a MISMATCH with ``first_bad_leaf`` null.

The torch work is behind the :class:`Replayer` protocol
(:class:`hypertrain.auditor.replayer.TorchReplayer` is the real one, imported after the
determinism env is configured). Pure: no trio, no httpx, no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

import attrs
import numpy as np

from hypertrain.auditor.checks import (
    ServedState,
    assignment_violation,
    check_serves,
    commitment_failure,
    ef_in_state,
    missing_starts,
    zeros_like_model,
)
from hypertrain.auditor.errors import BadJob, NotReady
from hypertrain.auditor.job import AuditJob, windows_of
from hypertrain.protocol.envelope import Envelope, seal
from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.f32 import f32_from_hex
from hypertrain.protocol.hashes import rng_ctr, sha256_hex
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.merkle import merkle_root_hex
from hypertrain.protocol.messages import ReplayEnv, ReplayVerdict, VerdictResult
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.trainer.codec import compress
from hypertrain.trainer.errors import TrainerError
from hypertrain.trainer.leaves import stage_of
from hypertrain.trainer.params import F32Array, param_shapes
from hypertrain.trainer.state import TrainState, unpack_state

__all__ = [
    "NO_REPLAY_ROOT",
    "VERDICT_TTL_ROUNDS",
    "ZERO_F32",
    "Evidence",
    "Outcome",
    "Prepared",
    "Replayed",
    "Replayer",
    "Samples",
    "cpu_replay_env",
    "decide",
    "prepare",
    "replay_outcome",
    "seal_verdict",
    "start_theta",
    "verdict_body",
]

NO_REPLAY_ROOT: Final = "0" * 64
"""``recomputed_leaves_root`` of a verdict reached without replaying."""
VERDICT_TTL_ROUNDS: Final = 1200
"""A verdict's ``exp_drand`` is ``serve_deadline + VERDICT_TTL_ROUNDS`` (spec 2.3)."""
ZERO_F32: Final = "00000000"

Samples = Callable[[Sequence[int]], np.ndarray[Any, Any]]
"""Token rows (``[len(ids), seq_len+1]``) of sample ids, in the order given."""


@attrs.frozen
class Outcome:
    """A verdict as a value; ``reason`` is for the operator's log, it is not signed."""

    result: VerdictResult
    first_bad_leaf: int | None
    recomputed_leaves_root: str
    reason: str


@attrs.frozen(eq=False)
class Replayed:
    """Replayed leaves (full: ``0 .. u``; a window ``[a, b]``: ``a+1 .. b``) and the theta at
    the last of them."""

    digests: tuple[bytes, ...]
    theta_end: dict[str, F32Array]


class Replayer(Protocol):
    """The torch side of a replay (:class:`hypertrain.auditor.replayer.TorchReplayer`)."""

    def full(self, job: AuditJob, theta_start: dict[str, F32Array], samples: Samples) -> Replayed:
        """Round ``job.w`` trained from ``theta_start`` with a reset optimizer state."""
        ...

    def window(
        self, job: AuditJob, state: TrainState, a: int, b: int, samples: Samples
    ) -> Replayed:
        """Leaves ``a+1 .. b`` replayed from the full ``state`` at leaf ``a``."""
        ...


@attrs.frozen(eq=False)
class Evidence:
    """What the adapter fetched: every blob by sha256 (hash-checked), the serve envelopes it
    knows and the beacon round it learnt them at (None: not known)."""

    blobs: Mapping[str, bytes]
    serves: tuple[Mapping[str, Any], ...]
    now_round: int | None


@attrs.frozen(eq=False)
class Prepared:
    """The inputs of the replay, every check before MISMATCH passed."""

    theta_start: dict[str, F32Array]
    served: Mapping[int, ServedState]
    ef_in: dict[str, F32Array]


def _no_replay(result: VerdictResult, reason: str) -> Outcome:
    return Outcome(result, None, NO_REPLAY_ROOT, reason)


def start_theta(job: AuditJob, blob: bytes) -> dict[str, F32Array]:
    """The public start state's theta; BadJob unless it decodes, fits the model and hashes to
    the RoundOpen's ``theta_hash``."""
    try:
        theta = unpack_state(blob).theta
    except Malformed as e:
        raise BadJob(f"the start state does not decode ({e.detail})") from e
    if {n: tuple(a.shape) for n, a in theta.items()} != param_shapes(job.manifest.model):
        raise BadJob("the start state does not fit the run's model")
    round_open = job.round_open["body"]
    want = round_open.get("theta_hash") if isinstance(round_open, Mapping) else None
    if th_hex(theta) != want:
        raise BadJob("the start state does not hash to the RoundOpen's theta_hash")
    return theta


def prepare(job: AuditJob, evidence: Evidence) -> Outcome | Prepared:
    """BAD_PROOF, ASSIGNMENT_VIOLATION, WITHHELD in order, else the replay's inputs (module
    docstring). ``job`` must have passed :func:`~hypertrain.auditor.job.check_job`."""
    if job.theta_start_sha256 not in evidence.blobs:
        raise BadJob("the start state was not fetched")
    theta_start = start_theta(job, evidence.blobs[job.theta_start_sha256])
    failure = commitment_failure(job)
    if failure is not None:
        return _no_replay("BAD_PROOF", failure)
    windows = windows_of(job)
    served: Mapping[int, ServedState] = {}
    if job.challenge.mode == "segments":
        found = check_serves(job, evidence.serves, evidence.blobs, windows)
        if found.failure is not None:
            return _no_replay("BAD_PROOF", found.failure)
        served = found.served
    ef_in = ef_in_state(job, evidence.blobs)
    if isinstance(ef_in, str):
        return _no_replay("BAD_PROOF", ef_in)
    if ef_in is None:
        if f32_from_hex(job.manifest.outer.ef_beta) != 0:
            return _no_replay("BAD_PROOF", "the committed ef_in is not available to rebuild")
        ef_in = zeros_like_model(job)
    bad = assignment_violation(job)
    if bad is not None:
        return _no_replay("ASSIGNMENT_VIOLATION", f"leaf {bad} was trained on other samples")
    missing = missing_starts(windows, served) if job.challenge.mode == "segments" else []
    if missing:
        ts = [a * job.manifest.inner.J for a in missing]
        deadline = job.challenge.serve_deadline
        if evidence.now_round is not None and evidence.now_round > deadline:
            return _no_replay("WITHHELD", f"no state served for t={ts} by round {deadline}")
        raise NotReady(f"no state served yet for t={ts} (serve_deadline {deadline})")
    return Prepared(theta_start=theta_start, served=served, ef_in=ef_in)


def _stage_theta_hashes(theta: Mapping[str, F32Array], manifest: RunManifest) -> list[str]:
    pp, n_layers = manifest.reference_spec.layout.pp, manifest.model.n_layers
    owned: list[dict[str, F32Array]] = [{} for _ in range(pp)]
    for name, array in theta.items():
        owned[stage_of(name, n_layers, pp)][name] = array
    return [th_hex(part) for part in owned]


def _cheap_bad_leaves(job: AuditJob, theta_start: Mapping[str, F32Array]) -> list[int]:
    bad = [
        i for i, p in enumerate(job.preimages) if p.rng_ctr != rng_ctr(job.run_id, job.w, p.t, -1)
    ]
    leaf0 = job.preimages[0]
    if (leaf0.loss_f32, leaf0.norm_f32) != (ZERO_F32, ZERO_F32):
        bad.append(0)
    if job.challenge.mode == "segments":
        committed = [s.theta for s in leaf0.stages]
        if committed != _stage_theta_hashes(theta_start, job.manifest):
            bad.append(0)
    return bad


def _compare(digests: Sequence[bytes], committed: Sequence[str], first: int) -> list[int]:
    return [first + k for k, d in enumerate(digests) if d.hex() != committed[first + k]]


def replay_outcome(
    job: AuditJob, prepared: Prepared, replayer: Replayer, samples: Samples
) -> Outcome:
    """MISMATCH or MATCH (module docstring); BadJob when the trainer cannot replay the run."""
    bad = _cheap_bad_leaves(job, prepared.theta_start)
    rebuilt: list[bytes] = []
    theta_end: dict[str, F32Array] | None = None
    u = job.manifest.inner.H // job.manifest.inner.J
    try:
        if job.challenge.mode == "full":
            replayed = replayer.full(job, prepared.theta_start, samples)
            rebuilt += replayed.digests
            bad += _compare(replayed.digests, job.leaves, 0)
            theta_end = replayed.theta_end
        else:
            for a, b in windows_of(job):
                replayed = replayer.window(job, prepared.served[a].state, a, b, samples)
                rebuilt += replayed.digests
                bad += _compare(replayed.digests, job.leaves, a + 1)
                if b == u:
                    theta_end = replayed.theta_end
    except TrainerError as e:
        raise BadJob(f"the trainer cannot replay this run: {e}") from e
    root = merkle_root_hex(rebuilt)
    if bad:
        first = min(bad)
        return Outcome("MISMATCH", first, root, f"leaf {first} differs from the replay")
    if theta_end is None:
        raise BadJob("the final window was not replayed")
    if th_hex(theta_end) != job.commit.final_theta_hash:
        return Outcome("MISMATCH", None, root, "final_theta_hash differs from the replay")
    delta = {
        n: np.asarray(prepared.theta_start[n], dtype=np.float32) - theta_end[n] for n in theta_end
    }
    packed = compress(delta, prepared.ef_in, float(f32_from_hex(job.manifest.outer.ef_beta)))
    if packed.delta_hash() != job.commit.delta_hash or packed.delta_bytes != job.commit.delta_bytes:
        return Outcome("MISMATCH", None, root, "the rebuilt delta does not hash to delta_hash")
    return Outcome("MATCH", None, root, "every replayed leaf and the delta match")


def decide(job: AuditJob, evidence: Evidence, replayer: Replayer, samples: Samples) -> Outcome:
    """:func:`prepare` then, when it found no fault, :func:`replay_outcome`."""
    prepared = prepare(job, evidence)
    if isinstance(prepared, Outcome):
        return prepared
    return replay_outcome(job, prepared, replayer, samples)


def cpu_replay_env(manifest: RunManifest) -> ReplayEnv:
    """The replay environment of a CPU auditor (spec 6.3)."""
    return ReplayEnv(
        image_digest=manifest.reference_spec.image_digest,
        driver="cpu",
        gpu_uuid_sha256=sha256_hex(b"cpu"),
        sm_count=1,
    )


def verdict_body(job: AuditJob, outcome: Outcome) -> ReplayVerdict:
    """The ReplayVerdict of ``outcome`` for ``job``."""
    return ReplayVerdict(
        challenge_hash=job.challenge_hash,
        first_bad_leaf=outcome.first_bad_leaf,
        result=outcome.result,
        recomputed_leaves_root=outcome.recomputed_leaves_root,
        replay_env=cpu_replay_env(job.manifest),
    )


def seal_verdict(keypair: Keypair, job: AuditJob, outcome: Outcome) -> Envelope:
    """The verdict envelope, ``exp_drand = serve_deadline + 1200`` (spec 2.3)."""
    exp = job.challenge.serve_deadline + VERDICT_TTL_ROUNDS
    return seal(keypair, "ReplayVerdict", job.run_id, verdict_body(job, outcome), exp)
