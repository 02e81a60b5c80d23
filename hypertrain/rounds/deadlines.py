"""Round deadlines in drand rounds: the run config, the template of spec 4.1 and time <-> round.

Every deadline is a drand round number ``D``; the only clock is the latest verified round the
operator pushed. A round's six deadlines follow from its ``d_open``, the manifest's timeouts
``T`` (``verify.T``) and the operator's :class:`RunConfig`::

    d_assign = d_open   + T.assign_after_open
    d_commit = d_assign + config.train_rounds
    d_audit  = d_commit + T.audit_after_commit        (>= 40 rounds: clock-skew margin)
    d_upload = d_commit + T.upload_after_commit
    d_final  = max(d_audit, d_upload) + config.final_after_upload
    serve_deadline = d_audit + T.serve_deadline       (in AuditChallenge)

With the spec's example timeouts (20/40/300/900) a round opened at ``d_open = 1000`` with
``train_rounds = 100`` and ``final_after_upload = 50`` has ``d_assign 1020, d_commit 1120,
d_audit 1160, d_upload 1420, d_final 1470`` and ``serve_deadline 2060`` (later than ``d_final``:
finalize then waits for the audits, spec 4.1 NOTE).

Time <-> round: ``ChainInfo.round_at`` (latest round due at ``t``) and ``ChainInfo.time_of``
(when round ``r`` is due) live in :mod:`hypertrain.beacon.chain`; this module adds only
:func:`round_at_or_after`, the first round due at or after ``t``. It takes anything with
``genesis_ms`` and ``period_ms`` (a ``ChainInfo``) so that this pure module does not import the
beacon package, which pulls in Trio and HTTP.
"""

from __future__ import annotations

import math
from typing import Final, Protocol

from attrs import asdict, field, frozen

from hypertrain.protocol.manifest import Timeouts
from hypertrain.protocol.messages import RoundOpen, check_deadline_order
from hypertrain.protocol.validators import int_in, optional, pos_int

__all__ = [
    "MAX_FINAL_AFTER_UPLOAD",
    "MAX_TRAIN_ROUNDS",
    "ChainSchedule",
    "Deadlines",
    "RunConfig",
    "round_at_or_after",
    "serve_deadline",
    "template",
]

MAX_TRAIN_ROUNDS: Final = 1_000_000
MAX_FINAL_AFTER_UPLOAD: Final = 1_000_000


@frozen
class RunConfig:
    """The operator's ``PUT .../config`` body: the training window and the finalize delay.

    ``train_rounds`` and ``final_after_upload`` are drand rounds in ``[1, 10^6]``;
    ``total_rounds`` (optional, ``>= 1``) is how many rounds the run trains before it stops.
    """

    train_rounds: int = field(validator=int_in(1, MAX_TRAIN_ROUNDS))
    final_after_upload: int = field(validator=int_in(1, MAX_FINAL_AFTER_UPLOAD))
    total_rounds: int | None = field(default=None, validator=optional(pos_int))


@frozen
class Deadlines:
    """The six deadlines of one round (drand rounds), ordered as RoundOpen requires::

        d_open < d_assign < d_commit < d_audit < d_final   and   d_commit < d_upload <= d_final

    A violation raises :class:`~hypertrain.protocol.validators.FieldError` (a ``ValueError``).
    """

    d_open: int = field(validator=pos_int)
    d_assign: int = field(validator=pos_int)
    d_commit: int = field(validator=pos_int)
    d_audit: int = field(validator=pos_int)
    d_upload: int = field(validator=pos_int)
    d_final: int = field(validator=pos_int)

    def __attrs_post_init__(self) -> None:
        check_deadline_order(
            self.d_open, self.d_assign, self.d_commit, self.d_audit, self.d_upload, self.d_final
        )

    @classmethod
    def of(cls, round_open: RoundOpen) -> Deadlines:
        """The deadlines a RoundOpen body carries."""
        return cls(
            d_open=round_open.d_open,
            d_assign=round_open.d_assign,
            d_commit=round_open.d_commit,
            d_audit=round_open.d_audit,
            d_upload=round_open.d_upload,
            d_final=round_open.d_final,
        )

    def as_dict(self) -> dict[str, int]:
        """``{"d_open": ..., ..., "d_final": ...}``, ready to splat into a RoundOpen body."""
        return asdict(self)

    def accept_open(self, now: int) -> bool:
        """Accept is allowed while ``d_assign <= D < d_commit``."""
        return self.d_assign <= now < self.d_commit

    def commit_excluded(self, received_round: int) -> bool:
        """A Commit received at ``received_round >= d_audit`` is EXCLUDED (the only cut-off;
        there is no hard reject at ``d_commit``, spec 1.3 step 5)."""
        return received_round >= self.d_audit

    def upload_open(self, now: int) -> bool:
        """Leaves, uploads and DeltaManifest are taken before ``d_upload``."""
        return now < self.d_upload

    def audit_due(self, now: int) -> bool:
        """Audit selection may run once ``D >= d_audit`` (and ``drand[d_audit]`` is known)."""
        return now >= self.d_audit

    def finalize_due(self, now: int) -> bool:
        """Finalize is allowed once ``D >= d_final`` (other conditions are the caller's)."""
        return now >= self.d_final


def template(d_open: int, T: Timeouts, config: RunConfig) -> Deadlines:  # noqa: N803 (spec name)
    """The deadlines of a round opened at ``d_open`` (spec 4.1, the server's ``_template``)."""
    d_assign = d_open + T.assign_after_open
    d_commit = d_assign + config.train_rounds
    d_audit = d_commit + T.audit_after_commit
    d_upload = d_commit + T.upload_after_commit
    d_final = max(d_audit, d_upload) + config.final_after_upload
    return Deadlines(
        d_open=d_open,
        d_assign=d_assign,
        d_commit=d_commit,
        d_audit=d_audit,
        d_upload=d_upload,
        d_final=d_final,
    )


def serve_deadline(d_audit: int, T: Timeouts) -> int:  # noqa: N803 (spec name)
    """``d_audit + T.serve_deadline``: the AuditChallenge's StateServe deadline."""
    return d_audit + T.serve_deadline


class ChainSchedule(Protocol):
    """A drand chain's schedule in integer milliseconds (``ChainInfo`` satisfies this)."""

    @property
    def genesis_ms(self) -> int: ...

    @property
    def period_ms(self) -> int: ...


def round_at_or_after(chain: ChainSchedule, t: float) -> int:
    """The first round due at or after unix time ``t`` (spec 4.1)::

        round_at_or_after(t) = 1 if t <= genesis else ceil((t - genesis) / period) + 1

    Exact in integer milliseconds: ``t`` is first rounded to the nearest microsecond (absorbing
    float noise such as ``x.3 * 1000``), then up to the millisecond, so
    ``chain.time_of(round_at_or_after(chain, t)) >= t`` and the round before is due before
    ``t``; for a ``t`` that is exactly a round's time it returns that round, like
    ``ChainInfo.round_at``.
    """
    if not math.isfinite(t):
        raise ValueError(f"time must be finite, got {t!r}")
    t_us = round(t * 1_000_000)
    t_ms = -(-t_us // 1000)
    if t_ms <= chain.genesis_ms:
        return 1
    return -(-(t_ms - chain.genesis_ms) // chain.period_ms) + 1
