"""A run of a few real merged rounds of the tiny model, in a dict object store, and the
checkpoint over them: what the checkpoint tests (format, verify, sample, export) start from."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import attrs
import numpy as np

from hypertrain.aggregator.checkpoint import CheckpointInfo, DatasetInfo, Status, build_checkpoint
from hypertrain.aggregator.outerstate import unpack_outer
from hypertrain.aggregator.step import MergeInputs, Step, merge_blobs
from hypertrain.aggregator.tape import SignedTape, parse_signed_tape
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.trainer.codec import encode_dense_int8
from hypertrain.trainer.params import init_state_hash, param_shapes
from tests.trainer.helpers import tiny_manifest

COORD = Keypair.from_seed(b"\x01" * 32)
OTHER = Keypair.from_seed(b"\x09" * 32)
MINERS = tuple(Keypair.from_seed(bytes([i]) * 32).ss58 for i in (2, 3, 4))


def key_of(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


def run_manifest() -> RunManifest:
    """The tiny model's manifest with :data:`COORD` as K_coord."""
    return attrs.evolve(tiny_manifest(), coord_pubkey=COORD.ss58)


def delta(manifest: RunManifest, seed: int, scale: float = 0.01) -> bytes:
    rng = np.random.default_rng(seed)
    shapes = param_shapes(manifest.model)
    return encode_dense_int8(
        {n: (rng.standard_normal(s) * scale).astype(np.float32) for n, s in shapes.items()}
    )


@attrs.frozen
class Chain:
    """``rounds`` merged rounds (round 0 from genesis), every object in ``store``."""

    manifest: RunManifest
    store: dict[str, bytes]
    steps: tuple[Step, ...]

    def tapes(self) -> list[SignedTape]:
        return [parse_signed_tape(self.store[step.tape_key]) for step in self.steps]

    def theta(self) -> dict[str, np.ndarray]:
        return unpack_outer(self.store[self.steps[-1].out_state]).theta

    def checkpoint(self, status: Status = "final", key: Keypair = COORD) -> dict[str, bytes]:
        """The three files of the checkpoint over every round."""
        return build_checkpoint(
            key,
            status=status,
            tapes=self.tapes(),
            theta=self.theta(),
            model=self.manifest.model,
            info=INFO_OF(self.manifest),
        )


def INFO_OF(manifest: RunManifest) -> CheckpointInfo:  # noqa: N802 (a constant's shape)
    return CheckpointInfo(
        license="Apache-2.0",
        dataset=DatasetInfo(
            name="stdlib",
            license="PSF-2.0",
            attribution="The Python standard library, Python Software Foundation",
            merkle_root=manifest.dataset.merkle_root,
        ),
    )


def merge_round(
    manifest: RunManifest,
    w: int,
    prev: Step | None,
    uploads: Mapping[str, bytes],
    store: dict[str, bytes],
) -> Step:
    """``merge_blobs`` of round ``w`` as the daemon runs it; every object goes into ``store``."""
    store.update((key_of(blob), blob) for blob in uploads.values())
    inputs = MergeInputs(
        manifest.run_id(),
        w,
        manifest,
        init_state_hash(manifest.model) if prev is None else prev.theta_hash,
        None if prev is None else prev.out_state,
        tuple((hk, key_of(blob)) for hk, blob in sorted(uploads.items())),
    )
    prev_blob = None if prev is None else store[prev.out_state]
    step = merge_blobs(inputs, prev_blob, sorted(uploads.items()), COORD)
    store.update((key_of(blob), blob) for blob in step.objects)
    return step


def make_chain(rounds: int = 3, miners: int = 3) -> Chain:
    """``rounds`` rounds, each merging ``miners`` deltas (seeded: always the same bytes)."""
    manifest = run_manifest()
    store: dict[str, bytes] = {}
    steps: list[Step] = []
    for w in range(rounds):
        uploads = {hk: delta(manifest, 100 * w + i) for i, hk in enumerate(MINERS[:miners])}
        steps.append(merge_round(manifest, w, steps[-1] if steps else None, uploads, store))
    return Chain(manifest, store, tuple(steps))
