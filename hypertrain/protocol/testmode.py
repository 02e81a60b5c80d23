"""The CPU test-mode RunManifest: a tiny decoder a laptop trains bit for bit, with provenance.

:func:`build_test_mode_manifest` (alias ``test_mode_manifest``) returns the manifest and a
*provenance* dict mapping every leaf path of its body (``"inner.H"``,
``"verify.T.serve_deadline"``; an array such as ``"auditors"`` is one leaf) to a short sentence
saying where the value comes from. Its keys are exactly :func:`leaf_paths` of the body.

Some values cannot be real yet. Their sentences start with :data:`PLACEHOLDER`, and hashes among
them are ``pending_hash(label) = sha256_hex(b"hypertrain-testmode|pending|" + label)``:

- the dataset commitment (``dataset.*`` except its format fields): pending, computed by
  ``hypertrain datasets build``; pass ``dataset=`` to use a real one;
- ``init_state_hash``: pending, TH of the initial parameters computed by the trainer; pass
  ``init_state_hash=`` to use a real one;
- ``verify.cluster_rules_sha256``, ``reference_spec.spec_doc_sha256`` and
  ``reference_spec.image_digest``: nothing is pinned yet (CPU test mode runs no image).

``reference_spec.env`` pins the thread count and the CPU kernel path (:data:`CPU_KERNEL_ENV`:
``ATEN_CPU_CAPABILITY``, ``MKL_CBWR``), which miners and auditors set before importing torch
(DESIGN.md section 8).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.example import (
    QUICKNET_CHAIN_HASH,
    QUICKNET_GENESIS,
    QUICKNET_PERIOD,
    example_manifest,
)
from hypertrain.protocol.f32 import f32_hex
from hypertrain.protocol.manifest import Beacon, DatasetSpec, RunManifest

__all__ = [
    "BYTE_TOKENIZER_NAME",
    "BYTE_TOKENIZER_SHA256",
    "CPU_KERNEL_ENV",
    "PLACEHOLDER",
    "QUICKNET_BEACON",
    "TEST_TIMEOUTS",
    "build_test_mode_manifest",
    "decoder_param_count",
    "leaf_paths",
    "pending_hash",
]

PLACEHOLDER: Final = "PLACEHOLDER"
"""The first word of the provenance of every value that is not real yet."""

BYTE_TOKENIZER_NAME: Final = "ht-byte-259"
BYTE_TOKENIZER_SHA256: Final = hashlib.sha256(
    b"ht-byte-tokenizer-v1|vocab=259|bytes=0..255|bos=256|eos=257|pad=258"
).hexdigest()
"""The byte tokenizer's pin (spec/protocol.md section 10.1): ``ca59f3de...765f``."""

CPU_KERNEL_ENV: Final[Mapping[str, str]] = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE",
}
"""The CPU kernel path a CPU run pins in ``reference_spec.env`` for bitwise replay."""

QUICKNET_BEACON: Final = Beacon(
    chain_hash=QUICKNET_CHAIN_HASH, period=QUICKNET_PERIOD, genesis_time=QUICKNET_GENESIS
)
"""drand quicknet, the default clock of a run (spec/protocol.md section 4.2)."""

TEST_TIMEOUTS: Final[Mapping[str, int]] = {
    "assign_after_open": 2,
    "audit_after_commit": 40,
    "upload_after_commit": 45,
    "serve_deadline": 50,
    "dispute_per_level": 10,
}
"""``verify.T`` in drand rounds: the reference e2e CPU manifest's (spec section 12.3)."""

_PENDING_DOMAIN: Final = b"hypertrain-testmode|pending|"

_TINY = "test-mode tiny decoder sized for CPU runs (not tuned)"
_EXAMPLE = "as the spec's example manifest (spec section 3)"
_ONLY = "the only value the schema allows"
_CPU_FIXTURE = "the reference CPU trainer fixture (spec section 5.2 sizes)"
_DEFAULT_VERIFY = "default_verify(q) (spec section 3)"
_E2E_T = (
    "the reference e2e CPU manifest's timeouts 2/40/45/50/10 drand rounds (spec section 12.3), "
    "sized for a local demo chain; audit_after_commit 40 is the protocol minimum"
)
_LAYOUT = "one process on one device (the v1 client supports only layout.n_gpus == 1)"
_DATASET_PENDING = (
    f"{PLACEHOLDER} (pending: computed by `hypertrain datasets build`; pass dataset= to "
    "use the real commitment)"
)


def pending_hash(label: str) -> str:
    """The placeholder digest ``sha256_hex(b"hypertrain-testmode|pending|" + label)``."""
    return hashlib.sha256(_PENDING_DOMAIN + label.encode()).hexdigest()


def decoder_param_count(
    *,
    vocab: int,
    d_model: int,
    n_layers: int,
    n_heads: int,
    n_kv_heads: int,
    d_ff: int,
    n_experts: int = 1,
) -> int:
    """The trainer's parameter count of a decoder (spec section 5.2; untied embedding and head).

    The spec's example dims (4 layers, d 256, 4 heads, kv 4, d_ff 1024, vocab 259) give
    4,329,216.
    """
    kv = n_kv_heads * (d_model // n_heads)
    attention = 2 * d_model * d_model + 2 * d_model * kv
    mlp = 3 * d_model * d_ff
    if n_experts > 1:
        mlp = d_model * n_experts + n_experts * mlp
    per_layer = 2 * d_model + attention + mlp
    return 2 * vocab * d_model + n_layers * per_layer + d_model


def leaf_paths(body: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted paths of a body's leaves: every non-object value (arrays are one leaf)."""
    paths: list[str] = []
    for key, value in body.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            paths += leaf_paths(value, f"{path}.")
        else:
            paths.append(path)
    return paths


def _model() -> tuple[dict[str, Any], dict[str, str]]:
    dims = {"n_layers": 2, "d_model": 64, "n_heads": 2, "n_kv_heads": 2, "d_ff": 256}
    body: dict[str, Any] = {
        "arch": "decoder",
        **dims,
        "n_experts": 1,
        "top_k_experts": 1,
        "router_tiebreak": "lowest_index",
        "vocab": 259,
        "seq_len": 64,
        "rope_theta": 10000,
        "init_seed": 0,
        "param_count": decoder_param_count(vocab=259, n_experts=1, **dims),
        "compute_dtype": "fp32",
        "master_dtype": "fp32",
        "capacity_factor": f32_hex(1.25),
        "aux_loss_coef": f32_hex(0.01),
        "init_std": f32_hex(0.02),
    }
    dense = "dense model: no expert routing in test mode"
    unused = f"{_EXAMPLE}; unused with n_experts 1"
    prov = dict.fromkeys([*dims, "seq_len"], _TINY) | {
        "arch": "the v1 dense decoder (spec section 5.2)",
        "n_experts": dense,
        "top_k_experts": dense,
        "router_tiebreak": _ONLY,
        "vocab": "byte tokenizer ht-byte-259: 256 bytes + BOS, EOS, PAD (spec section 10.1)",
        "rope_theta": _EXAMPLE,
        "init_seed": _EXAMPLE,
        "param_count": "computed from the dims by decoder_param_count (spec section 5.2)",
        "compute_dtype": "fp32 for bitwise CPU replay (DESIGN.md section 8)",
        "master_dtype": _ONLY,
        "capacity_factor": unused,
        "aux_loss_coef": unused,
        "init_std": _EXAMPLE,
    }
    return body, prov


def _default_dataset() -> tuple[dict[str, Any], dict[str, str]]:
    n_samples = 4096
    body: dict[str, Any] = {
        "merkle_root": pending_hash("dataset-merkle-root"),
        "depth": (n_samples - 1).bit_length(),
        "n_samples": n_samples,
        "sample_format": "u32[seq_len+1] token ids",
        "shard_uri_template": "{shard_sha256}",
        "shard_sha256_root": pending_hash("dataset-shard-sha256-root"),
        "holdout_commit": pending_hash("dataset-holdout-commit"),
    }
    prov = dict.fromkeys(body, _DATASET_PENDING) | {
        "sample_format": "v1 byte-level u32 samples of seq_len+1 tokens (spec section 10.1)",
        "shard_uri_template": "shards addressed by their sha256 (spec section 10.1)",
    }
    return body, prov


def _inner() -> tuple[dict[str, Any], dict[str, str]]:
    body: dict[str, Any] = {
        "opt": "adamw",
        "betas": [f32_hex(0.9), f32_hex(0.95)],
        "eps": f32_hex(1e-8),
        "wd": f32_hex(0.1),
        "grad_clip": f32_hex(1.0),
        "micro_batch": 2,
        "grad_accum": 1,
        "H": 6,
        "J": 2,
        "lr_schedule": {
            "type": "wsd",
            "peak_lr": f32_hex(3e-3),
            "warmup": 2,
            "stable": 8000,
            "decay": 1900,
        },
        "state_policy": "carry",
        "rewarmup_steps": 0,
        "muon_momentum": f32_hex(0.95),
        "ns_steps": 5,
    }
    round_shape = (
        "the reference e2e CPU manifest: H 6, J 2, 4 leaves a round (spec section 12.3); "
        "H 6 also beat 30 and 100 at equal tokens (docs/results/parity.md)"
    )
    carry = "todo 7 decision: carry the inner state, no re-warmup (spec section 5.3)"
    prov = dict.fromkeys(
        ["opt", "betas", "eps", "wd", "grad_clip", "grad_accum", "muon_momentum", "ns_steps"],
        _EXAMPLE,
    ) | {
        "micro_batch": _CPU_FIXTURE,
        "H": round_shape,
        "J": round_shape,
        "lr_schedule.type": _ONLY,
        "lr_schedule.peak_lr": _CPU_FIXTURE,
        "lr_schedule.warmup": _CPU_FIXTURE,
        "lr_schedule.stable": _EXAMPLE,
        "lr_schedule.decay": _EXAMPLE,
        "state_policy": carry,
        "rewarmup_steps": carry,
    }
    return body, prov


def _outer() -> tuple[dict[str, Any], dict[str, str]]:
    body: dict[str, Any] = unstructure(example_manifest().outer)
    kept = (
        f"{_EXAMPLE}, kept: stored tapes and fixtures depend on it; bench/parity.py measured "
        "better values, which the demo uses (hypertrain.demo.tuning, docs/results/parity.md)"
    )
    measured = dict.fromkeys(["lr", "momentum", "preclip_norm", "cclip_tau"], kept)
    return body, dict.fromkeys(body, _EXAMPLE) | measured | {"center": _ONLY}


def _verify(vest_rounds: int, forgive_per_epoch: int) -> tuple[dict[str, Any], dict[str, str]]:
    body: dict[str, Any] = {
        "q_base": f32_hex(0.1),
        "k_segments": 3,
        "Q_top": 1,
        "probation_rounds": vest_rounds,
        "E_vest_rounds": vest_rounds,
        "s_min_reward_multiple": vest_rounds,
        "forgive_per_epoch": forgive_per_epoch,
        "influence_cap": f32_hex(0.25),
        "cluster_rules_sha256": pending_hash("cluster-rules"),
        "T": dict(TEST_TIMEOUTS),
    }
    like_e = "equal to E_vest_rounds, as default_verify(q) and the reference e2e manifest set them"
    prov = dict.fromkeys(["k_segments", "Q_top", "influence_cap"], _DEFAULT_VERIFY) | {
        "q_base": "the plan's default audit rate 0.1, so E_vest_rounds >= ceil(1/q) = 10",
        "E_vest_rounds": (
            "the vest_rounds argument (default 10 = ceil(1/q_base)); the service requires "
            "HYPERTRAIN_VEST_ROUNDS to equal it"
        ),
        "probation_rounds": like_e,
        "s_min_reward_multiple": like_e,
        "forgive_per_epoch": (
            "the forgive_per_epoch argument (default 1, default_verify); the service requires "
            "its ledger setting to equal it"
        ),
        "cluster_rules_sha256": (
            f"{PLACEHOLDER}: pending_hash('cluster-rules'); no cluster-rules document is pinned yet"
        ),
    }
    prov |= {f"T.{name}": _E2E_T for name in TEST_TIMEOUTS}
    return body, prov


def _reference_spec() -> tuple[dict[str, Any], dict[str, str]]:
    body: dict[str, Any] = {
        "image_digest": "sha256:" + pending_hash("cpu-test-mode-image"),
        "spec_doc_sha256": pending_hash("spec-doc"),
        "driver_allowlist": [],
        "sm_count": 170,
        "env": {
            "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
            "CUDA_DISABLE_PTX_JIT": "1",
            "cpu_threads": 1,
            **CPU_KERNEL_ENV,
        },
        "layout": {"pp": 1, "n_gpus": 1, "dp_size": 1, "ep_size": 1, "zero1": False},
    }
    inert = f"{_ONLY} (spec section 5.1); inert on CPU"
    prov = {
        "image_digest": (
            f"{PLACEHOLDER}: sha256:pending_hash('cpu-test-mode-image'); CPU test mode runs "
            "no container image"
        ),
        "spec_doc_sha256": f"{PLACEHOLDER}: pending_hash('spec-doc'); no spec document pinned",
        "driver_allowlist": "empty: no GPU driver on CPU (an empty list allows any)",
        "sm_count": f"{_EXAMPLE} (RTX 5090); only a GPU replay checks it",
        "env.CUBLAS_WORKSPACE_CONFIG": inert,
        "env.CUDA_DISABLE_PTX_JIT": inert,
        "env.cpu_threads": "one thread pins the CPU reduction order (DESIGN.md section 8)",
        "env.ATEN_CPU_CAPABILITY": (
            "the generic ATen kernels: the same code path on every x86 CPU, so replays are "
            "bitwise across machines (DESIGN.md section 8)"
        ),
        "env.MKL_CBWR": "MKL's conditional bitwise reproducibility mode (DESIGN.md section 8)",
    }
    prov |= {f"layout.{name}": _LAYOUT for name in body["layout"]}
    return body, prov


def _operator_budget(n_auditors: int) -> tuple[dict[str, Any], dict[str, str]]:
    body: dict[str, Any] = {
        "relay": {"instances": 0, "gpus_per_instance": 0, "usd_micro_per_round": 0},
        "auditor": {"instances": n_auditors, "gpus_per_instance": 0, "usd_micro_per_round": 0},
        "honeypot": {
            "instances": 0,
            "gpus_per_instance": 0,
            "usd_micro_per_round": 0,
            "rate": f32_hex(0.03),
        },
    }
    declared = "test mode on CPU: no GPUs, no cost; declared, not enforced"
    prov = {f"{role}.{name}": declared for role, fields in body.items() for name in fields}
    prov |= {
        "relay.instances": "no delta relay: miners upload straight to the service",
        "auditor.instances": "one CPU auditor instance per listed auditor",
        "honeypot.instances": "no honeypot instances in test mode",
        "honeypot.rate": "the plan's default honeypot rate 0.03 (operator guide section 4)",
    }
    return body, prov


def _beacon(beacon: Beacon | None) -> tuple[dict[str, Any], dict[str, str]]:
    source = (
        "drand quicknet, the default chain (spec section 4.2)"
        if beacon is None
        else "the beacon argument (the chain the run's clock follows)"
    )
    body = unstructure(QUICKNET_BEACON if beacon is None else beacon)
    return body, dict.fromkeys(body, source)


def _dataset(dataset: DatasetSpec | None) -> tuple[dict[str, Any], dict[str, str]]:
    if dataset is None:
        return _default_dataset()
    body = unstructure(dataset)
    return body, dict.fromkeys(leaf_paths(body), "the dataset argument")


def _prefixed(section: str, prov: Mapping[str, str]) -> dict[str, str]:
    return {f"{section}.{path}": text for path, text in prov.items()}


def build_test_mode_manifest(
    *,
    coord_pubkey: str,
    auditors: Sequence[str] = (),
    beacon: Beacon | None = None,
    epochs_per_round: int = 1,
    vest_rounds: int = 10,
    forgive_per_epoch: int = 1,
    dataset: DatasetSpec | None = None,
    init_state_hash: str | None = None,
) -> tuple[RunManifest, dict[str, str]]:
    """The CPU test-mode RunManifest and its provenance (module docstring).

    ``epochs_per_round``, ``vest_rounds`` and ``forgive_per_epoch`` must equal the service's
    ``HYPERTRAIN_EPOCHS_PER_ROUND``, ``HYPERTRAIN_VEST_ROUNDS`` and forgive setting (defaults
    1, 10, 1). ``beacon`` None means drand quicknet. Raises ValueError for repeated auditors and
    :class:`~hypertrain.protocol.errors.SchemaError` for values the manifest refuses (a
    ``vest_rounds`` below 10, a bad address...).
    """
    if len(set(auditors)) != len(auditors):
        raise ValueError("auditors: an auditor is listed twice")
    sections = {
        "model": _model(),
        "tokenizer": (
            {"name": BYTE_TOKENIZER_NAME, "sha256": BYTE_TOKENIZER_SHA256},
            dict.fromkeys(["name", "sha256"], "the byte tokenizer pin (spec section 10.1)"),
        ),
        "dataset": _dataset(dataset),
        "inner": _inner(),
        "outer": _outer(),
        "verify": _verify(vest_rounds, forgive_per_epoch),
        "reference_spec": _reference_spec(),
    }
    body: dict[str, Any] = {name: section[0] for name, section in sections.items()}
    provenance: dict[str, str] = {}
    for name, (_, prov) in sections.items():
        provenance |= _prefixed(name, prov)
    body["init_state_hash"] = init_state_hash or pending_hash("init-state")
    provenance["init_state_hash"] = (
        "the init_state_hash argument"
        if init_state_hash
        else f"{PLACEHOLDER} (pending: TH of the initial parameters, computed by the trainer; "
        "pass init_state_hash= to use the real one)"
    )
    beacon_body, beacon_prov = _beacon(beacon)
    budget_body, budget_prov = _operator_budget(len(auditors))
    body |= {
        "beacon": beacon_body,
        "auditors": list(auditors),
        "coord_pubkey": coord_pubkey,
        "budget": {"epochs_per_round": epochs_per_round},
        "operator_budget": budget_body,
    }
    provenance |= _prefixed("beacon", beacon_prov) | _prefixed("operator_budget", budget_prov)
    provenance |= {
        "auditors": "the auditors argument (each may sign ReplayVerdict and Resolution)",
        "coord_pubkey": "the coord_pubkey argument: the service's K_coord",
        "budget.epochs_per_round": (
            "the epochs_per_round argument (default 1); the service requires "
            "HYPERTRAIN_EPOCHS_PER_ROUND to equal it"
        ),
    }
    return structure(RunManifest, body), provenance
