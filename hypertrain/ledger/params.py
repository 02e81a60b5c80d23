"""The ledger's constants and params (spec 8), and its clock: epochs and ledger rounds.

Every amount is an integer number of units. ``UNIT = FULL_SHARE_MASS = 10^6`` units are paid
out per chain epoch at most; each finalized training round mints ``B_w = epochs_per_round *
10^6`` units. Time is integer Unix seconds::

    epoch_of(t) = (t - genesis_unix) // epoch_seconds        (-1 before genesis)
    round_of(t) = epoch_of(t) // epochs_per_round            (-1 before genesis)

``max_entries`` (the most hotkeys one answer names) is a param rather than a hard constant so
that tests can use a small cap; it is written into the journal's ``init`` record like the rest,
so a replay always uses the cap the answers were computed with.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from hypertrain.ledger.errors import LedgerRefused
from hypertrain.protocol.jcs import MAX_SAFE_INT

__all__ = [
    "DEFAULT_EPOCHS_PER_ROUND",
    "DEFAULT_EPOCH_SECONDS",
    "DEFAULT_FORGIVE_PER_EPOCH",
    "DEFAULT_VEST_ROUNDS",
    "FULL_SHARE_MASS",
    "F_MIN_PPM",
    "MAX_ENTRIES",
    "PPM",
    "QUICKNET_GENESIS_UNIX",
    "UNIT",
    "LedgerParams",
    "check_count",
    "check_int",
    "check_name",
]

UNIT: Final = 10**6
"""Units paid out per chain epoch at most (the per-epoch payout budget)."""
FULL_SHARE_MASS: Final = UNIT
"""The weight mass of a full share in an answer; Cortex divides by ``max(W, this)``."""
MAX_ENTRIES: Final = 65_536
"""The most hotkeys one answer names."""
PPM: Final = 10**6
F_MIN_PPM: Final = 800_000
"""The contribution weight of a miner with ``soft_score_ppm = 0`` (a full score weighs 10^6)."""
QUICKNET_GENESIS_UNIX: Final = 1_692_803_367
"""drand quicknet's genesis, the default clock origin."""
DEFAULT_EPOCH_SECONDS: Final = 4320
DEFAULT_EPOCHS_PER_ROUND: Final = 1
DEFAULT_VEST_ROUNDS: Final = 10
DEFAULT_FORGIVE_PER_EPOCH: Final = 1


def check_int(name: str, value: object, low: int = -MAX_SAFE_INT) -> int:
    """``value`` if it is an int (never a bool) in ``[low, 2^53-1]``; LedgerRefused otherwise."""
    if type(value) is not int or not low <= value <= MAX_SAFE_INT:
        raise LedgerRefused(f"{name} must be an integer in [{low}, 2^53-1], got {value!r}")
    return value


def check_count(name: str, value: object) -> int:
    """``value`` if it is an int in ``[0, 2^53-1]``."""
    return check_int(name, value, 0)


def check_name(name: str, value: object) -> str:
    """``value`` if it is a non-empty printable string without spaces (a hotkey, a run id)."""
    if type(value) is not str or not value or not value.isprintable() or " " in value:
        raise LedgerRefused(f"{name} must be a non-empty printable token, got {value!r}")
    return value


def _count(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    check_count(attribute.name, value)


def _positive(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    check_int(attribute.name, value, 1)


def _name(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    check_name(attribute.name, value)


@attrs.frozen(kw_only=True)
class LedgerParams:
    """What the ledger's arithmetic depends on; fixed for the life of a journal."""

    challenge_slug: str = attrs.field(validator=_name)
    genesis_unix: int = attrs.field(default=QUICKNET_GENESIS_UNIX, validator=_count)
    epoch_seconds: int = attrs.field(default=DEFAULT_EPOCH_SECONDS, validator=_positive)
    epochs_per_round: int = attrs.field(default=DEFAULT_EPOCHS_PER_ROUND, validator=_positive)
    vest_rounds: int = attrs.field(default=DEFAULT_VEST_ROUNDS, validator=_count)
    forgive_per_epoch: int = attrs.field(default=DEFAULT_FORGIVE_PER_EPOCH, validator=_count)
    max_entries: int = attrs.field(default=MAX_ENTRIES, validator=_positive)

    @property
    def round_budget(self) -> int:
        """``B_w``: units minted by each finalize."""
        return self.epochs_per_round * UNIT

    def epoch_of(self, t: int) -> int:
        """The chain epoch of Unix time ``t`` (-1 before genesis)."""
        if t < self.genesis_unix:
            return -1
        return (t - self.genesis_unix) // self.epoch_seconds

    def round_of(self, t: int) -> int:
        """The ledger round of Unix time ``t`` (-1 before genesis)."""
        return self.epoch_of(t) // self.epochs_per_round

    def to_record(self) -> dict[str, Any]:
        """Every field, defaults included (an ``init`` record never relies on defaults)."""
        return attrs.asdict(self)
