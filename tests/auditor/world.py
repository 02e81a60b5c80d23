"""A small world for the auditor tests: a built dataset, keys, a carry and a reset manifest
over it, a round-1 start (the end of a round 0 trained from the init), and a builder that turns a
trained round into the audit job the coordinator would lease (audit wire contract).

Imports torch (through the trainer): use it only from tests that depend on ``configured``.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import numpy as np

from hypertrain.datasets import BuildOptions, DatasetManifest, SourceRoot, build
from hypertrain.datasets.manifest import MANIFEST_FILE, load_record
from hypertrain.datasets.reader import Dataset
from hypertrain.datasets.tokenizer import VOCAB
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.envelope import NEVER, seal
from hypertrain.protocol.f32 import f32_from_hex
from hypertrain.protocol.hashes import metrics_leaf, tensor_root
from hypertrain.protocol.jcs import body_digest
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest, StatePolicy
from hypertrain.protocol.merkle import merkle_proof, merkle_root_hex
from hypertrain.protocol.messages import (
    AuditChallenge,
    Commit,
    LeafPreimage,
    RosterEntry,
    RoundOpen,
    StateServe,
)
from hypertrain.protocol.tensorhash import th_bytes, th_hex
from hypertrain.protocol.testmode import decoder_param_count
from hypertrain.rounds.segments import Window, select_segments, window_count
from hypertrain.trainer.codec import compress
from hypertrain.trainer.leaves import preimage_digest
from hypertrain.trainer.loop import Moments, RoundResult, StateAt, train_round
from hypertrain.trainer.params import F32Array, init_params, init_state_hash
from hypertrain.trainer.state import pack_state
from tests.trainer.helpers import TINY_DIMS, in_process_env, tiny_manifest

SEQ_LEN: Final = 16
TEXT: Final = "".join(
    f"line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(300)
)
W: Final = 1
SIG: Final = bytes(range(48))
ZERO: Final = "00" * 32
D_AUDIT: Final = 100
SERVE_DEADLINE: Final = D_AUDIT + 50
MINER_EXP: Final = 2**40
JOB_ID: Final = "a_00112233445566aa"
LEASE: Final = "5e" * 16

COORD: Final = Keypair.from_seed(b"\x01" * 32)
OWNER: Final = Keypair.from_seed(b"\x02" * 32)
MINER: Final = Keypair.from_seed(b"\x03" * 32)
AUDITOR: Final = Keypair.from_seed(b"\x04" * 32)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_dataset(root: Path) -> Path:
    """A tiny built dataset (byte tokens, seq_len 16, 64 samples a shard) under ``root``."""
    source = root / "corpus.txt"
    source.write_text(TEXT, encoding="utf-8")
    out = root / "data"
    build(
        BuildOptions(
            sources=(SourceRoot(source, "corpus"),),
            out=out,
            seq_len=SEQ_LEN,
            samples_per_shard=64,
            salt=b"s" * 32,
        )
    )
    return out


def run_manifest(data_dir: Path, policy: StatePolicy) -> RunManifest:
    """The tiny manifest (pp 2) over ``data_dir``, K_coord = COORD, auditors = [AUDITOR]."""
    record = load_record(DatasetManifest, data_dir / MANIFEST_FILE)
    base = tiny_manifest(env=in_process_env(), policy=policy)
    model = attrs.evolve(
        base.model,
        vocab=VOCAB,
        seq_len=SEQ_LEN,
        param_count=decoder_param_count(vocab=VOCAB, **TINY_DIMS),
    )
    return attrs.evolve(
        base,
        model=model,
        dataset=record.dataset_spec(),
        init_state_hash=init_state_hash(model),
        coord_pubkey=COORD.ss58,
        auditors=(AUDITOR.ss58,),
    )


@attrs.frozen(eq=False)
class World:
    """One run (``manifest``) and the start of its round ``W`` (module docstring)."""

    manifest: RunManifest
    data_dir: Path
    dataset: Dataset
    ids: tuple[int, ...]
    theta_start: dict[str, F32Array]
    carried: Moments | None

    @property
    def run_id(self) -> str:
        return self.manifest.run_id()

    @property
    def mode(self) -> str:
        return "segments" if self.manifest.inner.state_policy == "carry" else "full"

    def samples(self, ids: Sequence[int]) -> Any:
        return self.dataset.samples(ids)

    def other_ids(self) -> tuple[int, ...]:
        """As many sample ids as the assignment, none of them assigned."""
        taken = set(self.ids)
        return tuple(i for i in range(self.dataset.n_samples) if i not in taken)[: len(self.ids)]

    def train(
        self, ids: Sequence[int] | None = None, theta: dict[str, F32Array] | None = None
    ) -> RoundResult:
        """Round ``W`` trained honestly (states at every leaf kept)."""
        return train_round(
            self.manifest,
            self.run_id,
            W,
            self.theta_start if theta is None else theta,
            list(self.ids if ids is None else ids),
            self.samples,
            self.carried,
            keep_leaf_states=True,
        )


def make_world(data_dir: Path, policy: StatePolicy) -> World:
    """Round ``W``'s start: round 0 trained from the init on other ids gives theta and m, v."""
    manifest = run_manifest(data_dir, policy)
    dataset = Dataset.open(data_dir)
    inner = manifest.inner
    need = inner.micro_batch * inner.grad_accum * inner.H
    rng = np.random.default_rng(7)
    picked = rng.choice(dataset.n_samples, size=2 * need, replace=False)
    ids0, ids1 = [int(i) for i in picked[:need]], tuple(int(i) for i in picked[need:])
    run_id = manifest.run_id()
    round0 = train_round(manifest, run_id, 0, init_params(manifest.model), ids0, dataset.samples)
    carried = round0.opt_state_out if policy == "carry" else None
    return World(manifest, data_dir, dataset, ids1, round0.theta_end, carried)


# -- the job the coordinator would lease --------------------------------------------------------


def round_open(world: World) -> RoundOpen:
    return RoundOpen(
        w=W,
        prev_final_hash=ZERO,
        theta_hash=th_hex(world.theta_start),
        outer_state_hash=ZERO,
        center_hash=ZERO,
        roster=(RosterEntry(MINER.ss58, 0, "3f800000"),),
        roster_hash=ZERO,
        honeypot_commit=ZERO,
        d_open=10,
        d_assign=12,
        d_commit=60,
        d_audit=D_AUDIT,
        d_upload=105,
        d_final=300,
    )


def commit_of(
    world: World,
    result: RoundResult,
    *,
    ef_in: Mapping[str, F32Array] | None = None,
    delta_scale: float = 1.0,
) -> Commit:
    """The Commit a miner builds from ``result`` (delta against the public start)."""
    delta = {
        n: (np.asarray(world.theta_start[n], dtype=np.float32) - result.theta_end[n])
        * np.float32(delta_scale)
        for n in result.theta_end
    }
    beta = float(f32_from_hex(world.manifest.outer.ef_beta))
    packed = compress(delta, ef_in, beta)
    zeros = {n: np.zeros_like(a) for n, a in delta.items()}
    return Commit(
        w=W,
        hotkey=MINER.ss58,
        leaf_scheme="ht-leaf-v1",
        n_leaves=len(result.leaves),
        leaves_root=result.leaves_root,
        metrics_root=result.metrics_root,
        final_theta_hash=th_hex(result.theta_end),
        ef_in_hash=th_hex(ef_in if ef_in is not None else zeros),
        ef_out_hash=packed.ef_out_hash(),
        delta_hash=packed.delta_hash(),
        delta_bytes=packed.delta_bytes,
        tokens=result.tokens,
    )


def derived_segments(world: World, preimages: Sequence[LeafPreimage]) -> tuple[Window, ...]:
    inner, verify = world.manifest.inner, world.manifest.verify
    return select_segments(
        world.run_id,
        W,
        sha(SIG),
        MINER.ss58,
        u=window_count(inner.H, inner.J),
        k_segments=verify.k_segments,
        q_top=verify.Q_top,
        norms=[p.norm_f32 for p in preimages],
    )


def state_blob(state: StateAt) -> bytes:
    return pack_state(state.theta, state.opt.m, state.opt.v, state.opt.step)


def serve_of(
    world: World,
    challenge_hash: str,
    digests: Sequence[bytes],
    a: int,
    blob_state: StateAt,
    *,
    proof_index: int | None = None,
    step_shift: int = 0,
) -> tuple[dict[str, Any], bytes]:
    """A StateServe envelope (signed by MINER) of ``blob_state`` as leaf ``a``, and its blob."""
    blob = state_blob(blob_state)
    opt = blob_state.opt
    serve = StateServe(
        hotkey=MINER.ss58,
        challenge_hash=challenge_hash,
        t=a * world.manifest.inner.J,
        uri=f"objects/{sha(blob)}",
        tensor_root=tensor_root(
            th_bytes(blob_state.theta), th_bytes(opt.m), th_bytes(opt.v), opt.step + step_shift
        ),
        merkle_proof_leaf_in_leaves_root=tuple(
            p.hex() for p in merkle_proof(list(digests), a if proof_index is None else proof_index)
        ),
    )
    return seal(MINER, "StateServe", world.run_id, serve, MINER_EXP).to_json(), blob


@attrs.frozen(eq=False)
class Built:
    """A leased job as JSON and the objects it names (by sha256)."""

    job: dict[str, Any]
    blobs: dict[str, bytes]

    def copy(self) -> Built:
        return Built(copy.deepcopy(self.job), dict(self.blobs))


def make_job(
    world: World,
    result: RoundResult,
    *,
    states: Sequence[StateAt] | None = None,
    commit: Commit | None = None,
    segments: Sequence[Window] | None = None,
    mode: str | None = None,
    serve_starts: Iterable[int] | None = None,
    preimages: Sequence[LeafPreimage] | None = None,
) -> Built:
    """The job of auditing ``result`` (trained by MINER in round ``W``).

    ``states`` are the states at each leaf the miner serves from (default: ``result``'s own);
    ``serve_starts`` the window starts it serves (default: all); ``segments`` and ``mode``
    override the challenge (sealed by K_coord all the same); ``preimages`` replace the round's
    leaves (the miner commits their roots).
    """
    if preimages is None:
        preimages = [leaf.preimage for leaf in result.leaves]
        digests = [leaf.digest for leaf in result.leaves]
        commit = commit or commit_of(world, result)
    else:
        digests = [preimage_digest(p) for p in preimages]
        base = commit or commit_of(world, result)
        metrics = merkle_root_hex(
            [metrics_leaf(bytes.fromhex(p.loss_f32), bytes.fromhex(p.norm_f32)) for p in preimages]
        )
        commit = attrs.evolve(base, leaves_root=merkle_root_hex(digests), metrics_root=metrics)
    mode = mode or world.mode
    if segments is None:
        segments = derived_segments(world, preimages) if mode == "segments" else ()
    challenge = AuditChallenge(
        w=W,
        target=MINER.ss58,
        beacon_round=D_AUDIT,
        beacon_sig_sha256=sha(SIG),
        mode=mode,  # type: ignore[arg-type]
        segments=tuple(segments),
        reasons=("random", "final") if mode == "segments" else ("random",),
        serve_deadline=SERVE_DEADLINE,
    )
    challenge_hash = body_digest(unstructure(challenge))
    start_blob = pack_state(world.theta_start)
    blobs = {sha(start_blob): start_blob}
    dataset_bytes = (world.data_dir / MANIFEST_FILE).read_bytes()
    serves = []
    if mode == "segments":
        leaf_states = list(states if states is not None else result.leaf_states)
        starts = {a for a, _ in segments} if serve_starts is None else set(serve_starts)
        for a in sorted(starts):
            envelope, blob = serve_of(world, challenge_hash, digests, a, leaf_states[a])
            serves.append(envelope)
            blobs[sha(blob)] = blob
    run_id = world.run_id
    job = {
        "id": JOB_ID,
        "lease": LEASE,
        "lease_expires_round": D_AUDIT + 660,
        "run_id": run_id,
        "w": W,
        "target": MINER.ss58,
        "challenge": unstructure(challenge),
        "challenge_hash": challenge_hash,
        "challenge_envelope": seal(COORD, "AuditChallenge", run_id, challenge, NEVER).to_json(),
        "round_open": seal(COORD, "RoundOpen", run_id, round_open(world), NEVER).to_json(),
        "commit": unstructure(commit),
        "commit_envelope": seal(MINER, "Commit", run_id, commit, MINER_EXP).to_json(),
        "delta_manifest": None,
        "state_serves": serves,
        "manifest": unstructure(world.manifest),
        "leaves": [d.hex() for d in digests],
        "preimages": [unstructure(p) for p in preimages],
        "assignment": {"sample_ids": list(world.ids), "global_step0": W * world.manifest.inner.H},
        "theta_start_sha256": sha(start_blob),
        "ef_in_sha256": None,
        "v0_sha256": None,
        "beacon_signature": SIG.hex(),
        "dataset_sha256": sha(dataset_bytes),
    }
    return Built(job, blobs)


def set_preimages(built: Built, preimages: Sequence[dict[str, Any]], *, releaf: bool) -> None:
    """Replace the job's preimages; ``releaf``: the coordinator's leaves follow them."""
    built.job["preimages"] = list(preimages)
    if releaf:
        from hypertrain.protocol.converter import structure

        built.job["leaves"] = [preimage_digest(structure(LeafPreimage, p)).hex() for p in preimages]


def dataset_objects(data_dir: Path) -> dict[str, bytes]:
    """The dataset manifest and its train shards, by sha256 (what the coordinator serves)."""
    manifest_bytes = (data_dir / MANIFEST_FILE).read_bytes()
    record = load_record(DatasetManifest, data_dir / MANIFEST_FILE)
    out = {sha(manifest_bytes): manifest_bytes}
    for i, shard_sha in enumerate(record.shard_sha256s):
        out[shard_sha] = (data_dir / f"shard-{i:05d}.u16").read_bytes()
    return out
