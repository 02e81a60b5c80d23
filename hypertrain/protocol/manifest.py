"""The RunManifest body and its sub-objects (spec/protocol.md section 3).

The owner signs one RunManifest per run; ``run_id = sha256_hex(JCS(body))`` (spec section 2.4).
Fields the latest reference added (marked † in the spec: ``model.od``, ``dataset.source``,
``dataset.assign_unit``, ``dataset.unit_sha256_root``, ``reference_spec.profile``) default to
``None`` and are *omitted*, never sent as null; a body that spells them ``null`` fails the
canonical-form check at intake.

The spec names ``od`` without its fields; :class:`ODSpec` follows the reference implementation
(preset, head_layers, objective, ...). ``od`` is required exactly when ``arch == "od-encoder"``,
and ``reference_spec.profile`` is allowed only then. The reference's further OD-preset checks
(dims per preset, layout all 1) are left to the OD trainer.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Literal

from attrs import field, frozen

from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.f32 import f32_from_hex
from hypertrain.protocol.jcs import body_digest
from hypertrain.protocol.validators import (
    FieldError,
    f32,
    hex64,
    image_digest,
    instance_of,
    int_in,
    list_of,
    one_of_literal,
    optional,
    pos_int,
    ss58,
    strict_bool,
    text,
    u_int,
)

__all__ = [
    "Beacon",
    "Budget",
    "ComputeBudget",
    "DatasetSource",
    "DatasetSpec",
    "HoneypotBudget",
    "InnerSpec",
    "Layout",
    "LrSchedule",
    "ModelSpec",
    "ODRecordSpec",
    "ODSpec",
    "OperatorBudget",
    "OuterSpec",
    "ReferenceEnv",
    "ReferenceSpec",
    "RunManifest",
    "Timeouts",
    "TokenizerSpec",
    "VerifySpec",
    "vesting_rounds",
]

Arch = Literal["decoder", "od-encoder"]
ComputeDtype = Literal["bf16", "fp32"]
SampleFormat = Literal["u32[seq_len+1] token ids", "u16[seq_len+1] token ids"]
InnerOpt = Literal["adamw", "muon"]
StatePolicy = Literal["reset", "derived", "carry"]
OuterOpt = Literal["nesterov", "sparseloco"]
Profile = Literal["od-bf16-det-eager-v1", "od-fp32-ref-v1"]
ODPreset = Literal["od-tiny", "od-base", "od-large"]
ODObjective = Literal["mlm", "distill", "decision"]
ODDecisionRule = Literal["log", "brier"]


def vesting_rounds(q: float) -> int:
    """``ceil(1/q)`` computed exactly (Fraction) on the float value of ``q`` in (0, 1]."""
    if not 0 < q <= 1:
        raise ValueError(f"q must be in (0, 1], got {q!r}")
    return math.ceil(1 / Fraction(q))


@frozen
class ODRecordSpec:
    """OD record layout (reference field set)."""

    state_len: int = field(validator=pos_int)
    n_questions: int = field(validator=pos_int)
    n_options: int = field(validator=pos_int)
    opt_len: int = field(validator=pos_int)
    instr_len: int = field(validator=pos_int)


@frozen
class ODSpec:
    """OpenDecision encoder settings († ``model.od``, reference field set; ``record`` nullable)."""

    preset: ODPreset = field(validator=one_of_literal(ODPreset))
    head_layers: int = field(validator=pos_int)
    objective: ODObjective = field(validator=one_of_literal(ODObjective))
    mask_ratio: str = field(validator=f32)
    mask_seed: int = field(validator=u_int)
    tokenizer_offset: int = field(validator=int_in(3, 3))
    warm_start: bool = field(validator=strict_bool)
    record: ODRecordSpec | None = field(validator=optional(instance_of(ODRecordSpec)))
    decision_rule: ODDecisionRule = field(validator=one_of_literal(ODDecisionRule))
    rps_weight: str = field(validator=f32)
    distill_temp: str = field(validator=f32)


@frozen
class ModelSpec:
    """The model shape; reals (capacity_factor, aux_loss_coef, init_std) are f32 hex."""

    arch: Arch = field(validator=one_of_literal(Arch))
    n_layers: int = field(validator=pos_int)
    d_model: int = field(validator=pos_int)
    n_heads: int = field(validator=pos_int)
    n_kv_heads: int = field(validator=pos_int)
    d_ff: int = field(validator=pos_int)
    n_experts: int = field(validator=pos_int)
    top_k_experts: int = field(validator=pos_int)
    router_tiebreak: Literal["lowest_index"] = field(
        validator=one_of_literal(Literal["lowest_index"])
    )
    vocab: int = field(validator=pos_int)
    seq_len: int = field(validator=pos_int)
    rope_theta: int = field(validator=pos_int)
    init_seed: int = field(validator=u_int)
    param_count: int = field(validator=pos_int)
    compute_dtype: ComputeDtype = field(validator=one_of_literal(ComputeDtype))
    master_dtype: Literal["fp32"] = field(validator=one_of_literal(Literal["fp32"]))
    capacity_factor: str = field(validator=f32)
    aux_loss_coef: str = field(validator=f32)
    init_std: str = field(validator=f32)
    od: ODSpec | None = field(default=None, validator=optional(instance_of(ODSpec)))

    def __attrs_post_init__(self) -> None:
        if (self.arch == "od-encoder") != (self.od is not None):
            raise FieldError("od", 'must be present exactly when arch == "od-encoder"')


@frozen
class TokenizerSpec:
    """The tokenizer's name and sha256."""

    name: str = field(validator=text(128))
    sha256: str = field(validator=hex64)


@frozen
class DatasetSource:
    """† Where the dataset mix comes from."""

    mix_id: str = field(validator=text(128))
    registry_sha256: str = field(validator=hex64)


@frozen
class DatasetSpec:
    """The dataset commitment. ``assign_unit`` and ``unit_sha256_root`` are both-or-neither."""

    merkle_root: str = field(validator=hex64)
    depth: int = field(validator=u_int)
    n_samples: int = field(validator=pos_int)
    sample_format: SampleFormat = field(validator=one_of_literal(SampleFormat))
    shard_uri_template: str = field(validator=text(512))
    shard_sha256_root: str = field(validator=hex64)
    holdout_commit: str = field(validator=hex64)
    source: DatasetSource | None = field(
        default=None, validator=optional(instance_of(DatasetSource))
    )
    assign_unit: int | None = field(default=None, validator=optional(pos_int))
    unit_sha256_root: str | None = field(default=None, validator=optional(hex64))

    def __attrs_post_init__(self) -> None:
        if (self.assign_unit is None) != (self.unit_sha256_root is None):
            raise FieldError("assign_unit", "assign_unit and unit_sha256_root go together")
        if self.assign_unit is not None and self.n_samples % self.assign_unit:
            raise FieldError("n_samples", "must be divisible by assign_unit")


@frozen
class LrSchedule:
    """Warmup-stable-decay learning rate schedule."""

    type: Literal["wsd"] = field(validator=one_of_literal(Literal["wsd"]))
    peak_lr: str = field(validator=f32)
    warmup: int = field(validator=u_int)
    stable: int = field(validator=u_int)
    decay: int = field(validator=u_int)


@frozen
class InnerSpec:
    """The inner optimizer; H steps with a leaf every J steps (J divides H)."""

    opt: InnerOpt = field(validator=one_of_literal(InnerOpt))
    betas: tuple[str, str] = field(validator=list_of(f32, min_len=2, max_len=2))
    eps: str = field(validator=f32)
    wd: str = field(validator=f32)
    grad_clip: str = field(validator=f32)
    micro_batch: int = field(validator=pos_int)
    grad_accum: int = field(validator=pos_int)
    H: int = field(validator=pos_int)
    J: int = field(validator=pos_int)
    lr_schedule: LrSchedule = field(validator=instance_of(LrSchedule))
    state_policy: StatePolicy = field(validator=one_of_literal(StatePolicy))
    rewarmup_steps: int = field(validator=u_int)
    muon_momentum: str = field(validator=f32)
    ns_steps: int = field(validator=pos_int)

    def __attrs_post_init__(self) -> None:
        if self.H % self.J:
            raise FieldError("J", "must divide H (n_leaves = H/J + 1)")


@frozen
class OuterSpec:
    """The outer (aggregation) optimizer."""

    opt: OuterOpt = field(validator=one_of_literal(OuterOpt))
    lr: str = field(validator=f32)
    momentum: str = field(validator=f32)
    topk_frac: str = field(validator=f32)
    bits: int = field(validator=pos_int)
    ef_beta: str = field(validator=f32)
    preclip_norm: str = field(validator=f32)
    cclip_tau: str = field(validator=f32)
    cclip_iters: int = field(validator=pos_int)
    center: Literal["prev_outer_update"] = field(
        validator=one_of_literal(Literal["prev_outer_update"])
    )


@frozen
class Timeouts:
    """Deadline offsets in drand rounds (``T``); ``audit_after_commit >= 40`` (skew margin)."""

    assign_after_open: int = field(validator=pos_int)
    audit_after_commit: int = field(validator=int_in(40, 2**53 - 1))
    upload_after_commit: int = field(validator=pos_int)
    serve_deadline: int = field(validator=pos_int)
    dispute_per_level: int = field(validator=pos_int)


@frozen
class VerifySpec:
    """Audit parameters; ``E_vest_rounds >= ceil(1/q_base)`` exactly on the f32 value."""

    q_base: str = field(validator=f32)
    k_segments: int = field(validator=u_int)
    Q_top: int = field(validator=u_int)
    probation_rounds: int = field(validator=pos_int)
    E_vest_rounds: int = field(validator=pos_int)
    s_min_reward_multiple: int = field(validator=pos_int)
    forgive_per_epoch: int = field(validator=u_int)
    influence_cap: str = field(validator=f32)
    cluster_rules_sha256: str = field(validator=hex64)
    T: Timeouts = field(validator=instance_of(Timeouts))

    def __attrs_post_init__(self) -> None:
        q = f32_from_hex(self.q_base)
        if not 0 < q <= 1:
            raise FieldError("q_base", f"must be in (0, 1], got {q!r}")
        needed = vesting_rounds(q)
        if self.E_vest_rounds < needed:
            raise FieldError("E_vest_rounds", f"must be >= ceil(1/q_base) = {needed}")


@frozen
class ReferenceEnv:
    """Environment pinned for bitwise replay.

    ``ATEN_CPU_CAPABILITY`` and ``MKL_CBWR`` are our addition (DESIGN.md section 8): bitwise
    torch on CPU holds only on the same CPU kernel path, so a CPU run pins it here and miners and
    auditors set these variables before importing torch. Omitted when absent, like the spec's
    optional fields, so manifests without them keep their run ids.
    """

    CUBLAS_WORKSPACE_CONFIG: Literal[":4096:8"] = field(
        validator=one_of_literal(Literal[":4096:8"])
    )
    CUDA_DISABLE_PTX_JIT: Literal["1"] = field(validator=one_of_literal(Literal["1"]))
    cpu_threads: int = field(validator=pos_int)
    ATEN_CPU_CAPABILITY: str | None = field(default=None, validator=optional(text(32)))
    MKL_CBWR: str | None = field(default=None, validator=optional(text(32)))


@frozen
class Layout:
    """Island layout: ``n_gpus = dp_size * ep_size``."""

    pp: int = field(validator=pos_int)
    n_gpus: int = field(validator=pos_int)
    dp_size: int = field(validator=pos_int)
    ep_size: int = field(validator=pos_int)
    zero1: bool = field(validator=strict_bool)

    def __attrs_post_init__(self) -> None:
        if self.n_gpus != self.dp_size * self.ep_size:
            raise FieldError("n_gpus", "must equal dp_size * ep_size")


@frozen
class ReferenceSpec:
    """The reference replay environment (image, drivers, layout; † ``profile``)."""

    image_digest: str = field(validator=image_digest)
    spec_doc_sha256: str = field(validator=hex64)
    driver_allowlist: tuple[str, ...] = field(validator=list_of(text(128)))
    sm_count: int = field(validator=pos_int)
    env: ReferenceEnv = field(validator=instance_of(ReferenceEnv))
    layout: Layout = field(validator=instance_of(Layout))
    profile: Profile | None = field(default=None, validator=optional(one_of_literal(Profile)))


@frozen
class Beacon:
    """The drand chain the run's clock follows."""

    chain_hash: str = field(validator=hex64)
    period: int = field(validator=pos_int)
    genesis_time: int = field(validator=pos_int)


@frozen
class Budget:
    """Reward budget pacing."""

    epochs_per_round: int = field(validator=pos_int)


@frozen
class ComputeBudget:
    """Declared operator compute for one role."""

    instances: int = field(validator=u_int)
    gpus_per_instance: int = field(validator=u_int)
    usd_micro_per_round: int = field(validator=u_int)


@frozen
class HoneypotBudget:
    """Declared honeypot compute and rate (f32)."""

    instances: int = field(validator=u_int)
    gpus_per_instance: int = field(validator=u_int)
    usd_micro_per_round: int = field(validator=u_int)
    rate: str = field(validator=f32)


@frozen
class OperatorBudget:
    """Declared operator budget per role."""

    relay: ComputeBudget = field(validator=instance_of(ComputeBudget))
    auditor: ComputeBudget = field(validator=instance_of(ComputeBudget))
    honeypot: HoneypotBudget = field(validator=instance_of(HoneypotBudget))


@frozen
class RunManifest:
    """The owner-signed contract of a run; see :meth:`run_id`."""

    model: ModelSpec = field(validator=instance_of(ModelSpec))
    tokenizer: TokenizerSpec = field(validator=instance_of(TokenizerSpec))
    dataset: DatasetSpec = field(validator=instance_of(DatasetSpec))
    inner: InnerSpec = field(validator=instance_of(InnerSpec))
    outer: OuterSpec = field(validator=instance_of(OuterSpec))
    verify: VerifySpec = field(validator=instance_of(VerifySpec))
    reference_spec: ReferenceSpec = field(validator=instance_of(ReferenceSpec))
    init_state_hash: str = field(validator=hex64)
    beacon: Beacon = field(validator=instance_of(Beacon))
    auditors: tuple[str, ...] = field(validator=list_of(ss58))
    coord_pubkey: str = field(validator=ss58)
    budget: Budget = field(validator=instance_of(Budget))
    operator_budget: OperatorBudget = field(validator=instance_of(OperatorBudget))

    def __attrs_post_init__(self) -> None:
        unit = self.dataset.assign_unit
        inner = self.inner
        if unit is not None and (inner.micro_batch * inner.grad_accum * inner.H) % unit:
            raise FieldError("dataset", "micro_batch*grad_accum*H must be divisible by assign_unit")
        if self.reference_spec.profile is not None and self.model.arch != "od-encoder":
            raise FieldError("reference_spec", 'profile is only allowed with arch "od-encoder"')

    def run_id(self) -> str:
        """``sha256_hex(JCS(body))`` of this manifest's canonical body (spec section 2.4)."""
        return body_digest(unstructure(self))
