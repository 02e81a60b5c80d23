"""Audit rates, the RoundOpen roster and audit selection (spec 6.1-6.2).

**Audit rate** ``q_i`` (f32 hex in the roster): ``1.0`` when any reason applies, else
``verify.q_base``. Reasons, in this order:

- ``probation``: the member's ``probation`` flag is set, or it is *not bonded* and
  ``w - admitted_w < probation_rounds`` (``admitted_w`` = first round the hotkey appeared in a
  roster; a member not yet admitted is admitted by this round);
- ``outlier``: flags ``outlier`` or ``copy``;
- ``cluster``: the member's cluster contains a blacklisted member.

No reason gives ``("random",)``. Spec 6.1 leaves the probation rule open (docs: "until bonded";
code: unbonded and in the first ``probation_rounds`` rounds). **We implement the v1 code's
rule**: after ``probation_rounds`` rounds an unbonded miner drops to ``q_base``; a bonded miner
is never auto-probated; the operator's ``probation`` flag keeps anyone at ``q = 1``.

**Roster**: the active members (not removed, not blacklisted: the caller filters) sorted by
hotkey; ``slot`` = index in that order (spec 5.4).

**Selection** at ``d_audit``: over the round's COMMITTED/UPLOADED miners (the caller passes
their roster entries), hotkey ``h`` is selected when
``int_be(sha256(b"ht-audit" || run_id || u64be(w) || drand_sig[d_audit] || h)) < q_i * 2^256``
exactly (``hashes.audit_selection_hash`` and ``hashes.audit_selected``).

Segment windows for ``segments`` mode (spec 6.2's Fisher-Yates draw, final window and top-Q by
committed norms) are left to the auditor work: the spec does not pin the pool order of the
draw, and both sides must derive identical windows.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Final, Literal

from attrs import field, frozen

from hypertrain.protocol.f32 import f32_hex
from hypertrain.protocol.hashes import audit_selected, audit_selection_hash, parse_hex32
from hypertrain.protocol.manifest import VerifySpec
from hypertrain.protocol.messages import RosterEntry
from hypertrain.protocol.validators import optional, strict_bool, u_int

__all__ = [
    "OUTLIER_FLAGS",
    "Q_ONE",
    "RosterMember",
    "audit_rate",
    "audit_reasons",
    "roster_entries",
    "select_for_audit",
]

AuditReason = Literal["random", "probation", "outlier", "cluster"]

Q_ONE: Final = f32_hex(1.0)
"""``"0000803f"``: the rate of a member with any audit reason."""
OUTLIER_FLAGS: Final = frozenset({"outlier", "copy"})


def _flags(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


@frozen
class RosterMember:
    """What the operator's roster row says about one admitted miner.

    ``bond`` and ``probation`` are the operator's manual flags, ``flags`` free-form markers
    (``outlier``/``copy`` raise the audit rate), ``cluster`` an optional cluster label and
    ``admitted_w`` the first round the hotkey appeared in a roster (``None`` if never).
    """

    hotkey: str
    bond: bool = field(default=False, validator=strict_bool)
    probation: bool = field(default=False, validator=strict_bool)
    flags: frozenset[str] = field(default=frozenset(), converter=_flags)
    cluster: str | None = None
    admitted_w: int | None = field(default=None, validator=optional(u_int))


def audit_reasons(
    member: RosterMember,
    w: int,
    verify: VerifySpec,
    faulted_clusters: Collection[str] = frozenset(),
) -> tuple[AuditReason, ...]:
    """Why ``member`` is audited at ``q = 1`` in round ``w``, or ``("random",)`` (see module
    doc); ``faulted_clusters`` are the clusters holding a blacklisted member."""
    why: list[AuditReason] = []
    admitted = w if member.admitted_w is None else member.admitted_w
    if member.probation or (not member.bond and w - admitted < verify.probation_rounds):
        why.append("probation")
    if member.flags & OUTLIER_FLAGS:
        why.append("outlier")
    if member.cluster is not None and member.cluster in faulted_clusters:
        why.append("cluster")
    return tuple(why) or ("random",)


def audit_rate(
    member: RosterMember,
    w: int,
    verify: VerifySpec,
    faulted_clusters: Collection[str] = frozenset(),
) -> str:
    """``q_i`` as f32 hex: :data:`Q_ONE` with any reason, else ``verify.q_base``."""
    reasons = audit_reasons(member, w, verify, faulted_clusters)
    return verify.q_base if reasons == ("random",) else Q_ONE


def roster_entries(
    members: Iterable[RosterMember],
    w: int,
    verify: VerifySpec,
    faulted_clusters: Collection[str] = frozenset(),
) -> tuple[RosterEntry, ...]:
    """The RoundOpen roster of round ``w``: sorted by hotkey, ``slot`` = index in that order,
    ``q_i`` from :func:`audit_rate`. ``members`` are the active ones (removed and blacklisted
    members are not rostered); a hotkey listed twice is a ``ValueError``."""
    ordered = sorted(members, key=lambda m: m.hotkey)
    hotkeys = [m.hotkey for m in ordered]
    if len(set(hotkeys)) != len(hotkeys):
        raise ValueError("a hotkey is listed twice in the roster")
    return tuple(
        RosterEntry(hotkey=m.hotkey, slot=slot, q_i=audit_rate(m, w, verify, faulted_clusters))
        for slot, m in enumerate(ordered)
    )


def select_for_audit(
    run_id: str,
    w: int,
    drand_sig: bytes,
    entries: Iterable[RosterEntry | tuple[str, str]],
) -> list[str]:
    """The hotkeys selected for audit in round ``w``, in hotkey order.

    ``run_id`` is hex64, ``drand_sig`` the 48 raw bytes of ``drand_sig[d_audit]`` and
    ``entries`` the roster entries (or ``(hotkey, q_i)`` pairs) of the miners that are
    COMMITTED or UPLOADED. ``q = 1`` selects every one, ``q = 0`` none.
    """
    run = parse_hex32(run_id, "run_id")
    rates = sorted(
        (e.hotkey, e.q_i) if isinstance(e, RosterEntry) else (e[0], e[1]) for e in entries
    )
    return [
        hotkey
        for hotkey, q_i in rates
        if audit_selected(audit_selection_hash(run, w, drand_sig, hotkey), q_i)
    ]
