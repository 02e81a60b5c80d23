"""Example bodies: the spec's example RunManifest and one valid instance of every message type.

The values follow spec/protocol.md section 3 ("Example manifest"): a CPU-sized 4-layer decoder,
AdamW, H=30/J=5, Nesterov outer step, q_base 0.1, T = 20/40/300/900/600. Hashes the example
cannot know are placeholders ``sha256("hypertrain-example|" + label)``.

Keys: the reference derives its example addresses with sr25519; we sign with ed25519, so by
default the coordinator is the ed25519 key of seed ``bytes(range(32))`` and the auditor that of
seed ``bytes(31) + b"\\x01"``. Passing the spec's sr25519 addresses instead
(:data:`SPEC_COORD_SS58`, :data:`SPEC_AUDITOR_SS58`) reproduces the reference's run id
:data:`SPEC_EXAMPLE_RUN_ID` byte for byte.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

from hypertrain.protocol.converter import structure
from hypertrain.protocol.f32 import f32_from_hex, f32_hex
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import Beacon, RunManifest, vesting_rounds
from hypertrain.protocol.messages import LeafPreimage

__all__ = [
    "EXAMPLE_AUDITOR_SEED",
    "EXAMPLE_COORD_SEED",
    "QUICKNET_CHAIN_HASH",
    "QUICKNET_GENESIS",
    "QUICKNET_PERIOD",
    "SPEC_AUDITOR_SS58",
    "SPEC_COORD_SS58",
    "SPEC_EXAMPLE_RUN_ID",
    "example_bodies",
    "example_hash",
    "example_leaf_preimage",
    "example_manifest",
]

QUICKNET_CHAIN_HASH: Final = "52db9ba70e0cc0f6eaf7803dd07447a1f5477735fd3f661792ba94600c84e971"
QUICKNET_GENESIS: Final = 1692803367
QUICKNET_PERIOD: Final = 3

EXAMPLE_COORD_SEED: Final = bytes(range(32))
EXAMPLE_AUDITOR_SEED: Final = bytes(31) + b"\x01"
SPEC_COORD_SS58: Final = "5HB7kpn92RS7uF9uWn8bXSvPVKFPg8kPUFDd5sbveGjX6Dbi"
SPEC_AUDITOR_SS58: Final = "5DP4qTec9XxffaALGWsEPhS1oWrDWMBjzhBmyzShREMJpymt"
SPEC_EXAMPLE_RUN_ID: Final = "ad8beb30084a2e53f817c45f1cbfdf1491162575f10f2c3d190645081b2ba2ff"


def example_hash(label: str) -> str:
    """The placeholder digest ``sha256_hex(b"hypertrain-example|" + label)``."""
    return hashlib.sha256(b"hypertrain-example|" + label.encode()).hexdigest()


def _verify_section() -> dict[str, Any]:
    q = f32_hex(0.1)
    e = vesting_rounds(f32_from_hex(q))
    return {
        "q_base": q,
        "k_segments": 3,
        "Q_top": 1,
        "probation_rounds": e,
        "E_vest_rounds": e,
        "s_min_reward_multiple": e,
        "forgive_per_epoch": 1,
        "influence_cap": f32_hex(0.25),
        "cluster_rules_sha256": example_hash("cluster-rules"),
        "T": {
            "assign_after_open": 20,
            "audit_after_commit": 40,
            "upload_after_commit": 300,
            "serve_deadline": 900,
            "dispute_per_level": 600,
        },
    }


def example_manifest(
    *,
    coord_pubkey: str | None = None,
    auditors: Sequence[str] | None = None,
    beacon: Beacon | None = None,
) -> RunManifest:
    """The spec's example RunManifest (coordinator, auditors and beacon overridable).

    ``beacon`` defaults to drand quicknet; a coordinator running its own chain accepts only a
    manifest naming that chain.
    """
    coord = coord_pubkey or Keypair.from_seed(EXAMPLE_COORD_SEED).ss58
    auditor_list = (
        list(auditors) if auditors is not None else [Keypair.from_seed(EXAMPLE_AUDITOR_SEED).ss58]
    )
    body: dict[str, Any] = {
        "model": {
            "arch": "decoder",
            "n_layers": 4,
            "d_model": 256,
            "n_heads": 4,
            "n_kv_heads": 4,
            "d_ff": 1024,
            "n_experts": 1,
            "top_k_experts": 1,
            "router_tiebreak": "lowest_index",
            "vocab": 259,
            "seq_len": 256,
            "rope_theta": 10000,
            "init_seed": 0,
            "param_count": 3_279_104,
            "compute_dtype": "fp32",
            "master_dtype": "fp32",
            "capacity_factor": f32_hex(1.25),
            "aux_loss_coef": f32_hex(0.01),
            "init_std": f32_hex(0.02),
        },
        "tokenizer": {"name": "ht-byte-259", "sha256": example_hash("tokenizer")},
        "dataset": {
            "merkle_root": example_hash("dataset-root"),
            "depth": 20,
            "n_samples": 781_250,
            "sample_format": "u32[seq_len+1] token ids",
            "shard_uri_template": "data/shards/{index:05d}.u32",
            "shard_sha256_root": example_hash("shard-root"),
            "holdout_commit": example_hash("holdout"),
        },
        "inner": {
            "opt": "adamw",
            "betas": [f32_hex(0.9), f32_hex(0.95)],
            "eps": f32_hex(1e-8),
            "wd": f32_hex(0.1),
            "grad_clip": f32_hex(1.0),
            "micro_batch": 8,
            "grad_accum": 1,
            "H": 30,
            "J": 5,
            "lr_schedule": {
                "type": "wsd",
                "peak_lr": f32_hex(3e-4),
                "warmup": 100,
                "stable": 8000,
                "decay": 1900,
            },
            "state_policy": "carry",
            "rewarmup_steps": 0,
            "muon_momentum": f32_hex(0.95),
            "ns_steps": 5,
        },
        "outer": {
            "opt": "nesterov",
            "lr": f32_hex(0.4),
            "momentum": f32_hex(0.9),
            "topk_frac": f32_hex(1.0),
            "bits": 8,
            "ef_beta": f32_hex(0.0),
            "preclip_norm": f32_hex(1.0),
            "cclip_tau": f32_hex(1.0),
            "cclip_iters": 1,
            "center": "prev_outer_update",
        },
        "verify": _verify_section(),
        "reference_spec": {
            "image_digest": "sha256:" + example_hash("image"),
            "spec_doc_sha256": example_hash("spec-doc"),
            "driver_allowlist": [],
            "sm_count": 170,
            "env": {
                "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
                "CUDA_DISABLE_PTX_JIT": "1",
                "cpu_threads": 1,
            },
            "layout": {"pp": 1, "n_gpus": 1, "dp_size": 1, "ep_size": 1, "zero1": False},
        },
        "init_state_hash": example_hash("init-state"),
        "beacon": {
            "chain_hash": QUICKNET_CHAIN_HASH,
            "period": QUICKNET_PERIOD,
            "genesis_time": QUICKNET_GENESIS,
        }
        if beacon is None
        else {
            "chain_hash": beacon.chain_hash,
            "period": beacon.period,
            "genesis_time": beacon.genesis_time,
        },
        "auditors": auditor_list,
        "coord_pubkey": coord,
        "budget": {"epochs_per_round": 1},
        "operator_budget": {
            "relay": {"instances": 1, "gpus_per_instance": 0, "usd_micro_per_round": 0},
            "auditor": {"instances": 1, "gpus_per_instance": 1, "usd_micro_per_round": 0},
            "honeypot": {
                "instances": 0,
                "gpus_per_instance": 1,
                "usd_micro_per_round": 0,
                "rate": f32_hex(0.03),
            },
        },
    }
    return structure(RunManifest, body)


def example_bodies(miner: str, auditor: str) -> dict[str, Mapping[str, Any]]:
    """One valid JSON body per message type (RunManifest excluded), for tests and demos.

    ``miner`` is the hotkey of miner-signed bodies (Accept, Commit, DeltaManifest, StateServe,
    Dispute) and the party of the Bisect; ``auditor`` is the Resolution's loser.
    """
    h = example_hash
    delta_hash = h("delta")
    return {
        "RoundOpen": {
            "w": 0,
            "prev_final_hash": h("init-state"),
            "theta_hash": h("init-state"),
            "outer_state_hash": h("zero"),
            "center_hash": h("zero"),
            "roster": [{"hotkey": miner, "slot": 0, "q_i": f32_hex(0.1)}],
            "roster_hash": h("roster"),
            "honeypot_commit": h("honeypot"),
            "d_open": 100,
            "d_assign": 120,
            "d_commit": 220,
            "d_audit": 260,
            "d_upload": 520,
            "d_final": 600,
        },
        "Accept": {
            "w": 0,
            "hotkey": miner,
            "assignment_hash": h("assignment"),
            "image_digest": "sha256:" + h("image"),
            "driver_version": "cpu",
            "n_gpus": 1,
        },
        "Commit": {
            "w": 0,
            "hotkey": miner,
            "leaf_scheme": "ht-leaf-v1",
            "n_leaves": 7,
            "leaves_root": h("leaves"),
            "metrics_root": h("metrics"),
            "final_theta_hash": h("final-theta"),
            "ef_in_hash": h("ef-in"),
            "ef_out_hash": h("ef-out"),
            "delta_hash": delta_hash,
            "delta_bytes": 1000,
            "tokens": 61680,
        },
        "Receipt": {"w": 0, "commit_hash": h("commit"), "received_round": 200},
        "DeltaManifest": {
            "w": 0,
            "hotkey": miner,
            "delta_hash": delta_hash,
            "uri": f"objects/{delta_hash}",
            "size": 1000,
            "format": "ht-dense-int8-v1",
            "chunks": [
                {"off": 0, "len": 600, "sha256": h("chunk-0")},
                {"off": 600, "len": 400, "sha256": h("chunk-1")},
            ],
        },
        "AuditChallenge": {
            "w": 0,
            "target": miner,
            "beacon_round": 260,
            "beacon_sig_sha256": h("beacon-sig"),
            "mode": "segments",
            "segments": [[0, 1], [3, 4]],
            "reasons": ["random"],
            "serve_deadline": 1160,
        },
        "StateServe": {
            "hotkey": miner,
            "challenge_hash": h("challenge"),
            "t": 15,
            "uri": f"objects/{h('state')}",
            "tensor_root": h("tensor-root"),
            "merkle_proof_leaf_in_leaves_root": [h("p0"), h("p1"), h("p2")],
        },
        "ReplayVerdict": {
            "challenge_hash": h("challenge"),
            "first_bad_leaf": None,
            "result": "MATCH",
            "recomputed_leaves_root": h("leaves"),
            "replay_env": {
                "image_digest": "sha256:" + h("image"),
                "driver": "cpu",
                "gpu_uuid_sha256": h("gpu"),
                "sm_count": 170,
            },
        },
        "Dispute": {"hotkey": miner, "verdict_hash": h("verdict"), "action": "contest"},
        "Bisect": {
            "dispute_id": h("dispute"),
            "level": "step",
            "interval": [0, 30],
            "N": 2,
            "hashes": [h("b0"), h("b1"), h("b2")],
            "party": miner,
        },
        "Resolution": {
            "dispute_id": h("dispute"),
            "op_spec": "step=5;layer=2;op=update",
            "inputs_hash": h("inputs"),
            "output_hash": h("output"),
            "loser": auditor,
        },
        "Forfeit": {
            "w": 0,
            "hotkey": miner,
            "cause": "MISMATCH",
            "evidence": [h("verdict")],
            "round_reward_burned": 10,
            "escrow_burned_units": 100,
            "blacklist": True,
            "debt_units": 0,
        },
        "Rollback": {
            "w": 0,
            "excluded": [miner],
            "old_theta_hash_w2": h("old-theta"),
            "new_theta_hash_w2": h("new-theta"),
            "new_outer_state_hash": h("new-outer"),
            "recomputed": ["agg_w", "step_w"],
            "cause_hashes": [h("verdict")],
        },
        "Finalize": {
            "w": 0,
            "final_theta_hash_w1": h("final-theta-w1"),
            "included": sorted([miner, auditor]),
            "entitlements_root": h("entitlements"),
        },
    }


def example_leaf_preimage(run_id: str) -> LeafPreimage:
    """A valid LeafPreimage of round 0, step 5."""
    body = {
        "run_id": run_id,
        "w": 0,
        "t": 5,
        "stages": [{"theta": example_hash("t"), "m": example_hash("m"), "v": example_hash("v")}],
        "batch_ids_sha256": example_hash("batch"),
        "rng_ctr": 12345,
        "loss_f32": f32_hex(5.5),
        "norm_f32": f32_hex(1.25),
    }
    return structure(LeafPreimage, body)
