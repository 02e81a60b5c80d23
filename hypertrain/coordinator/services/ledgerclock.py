"""The ledger's clock in drand rounds: when ledger events happen and rounds vest.

The ledger counts time in chain epochs of its :class:`~hypertrain.ledger.LedgerParams`
(``epoch_of``, ``round_of``, spec 8). The coordinator dates a ledger event by the chain time of
the latest drand round D (spec 4.1: "Ledger event time for an action = chain time of current
D"), in whole seconds. A final round turns VESTING at the first drand round of ledger round
``final + 1`` and RELEASED at the first of ``final + vest_rounds`` (:meth:`LedgerClock.marks`).
"""

from __future__ import annotations

import math

from attrs import frozen

from hypertrain.beacon.chain import ChainInfo
from hypertrain.coordinator.settings import CoordinatorSettings
from hypertrain.ledger import LedgerParams
from hypertrain.rounds.deadlines import round_at_or_after

__all__ = ["LedgerClock", "ledger_params"]


def ledger_params(settings: CoordinatorSettings, chain: ChainInfo) -> LedgerParams:
    """The ledger's params of a coordinator (genesis: ``genesis_unix``, else the chain's)."""
    genesis = settings.genesis_unix
    if genesis is None:
        genesis = math.floor(chain.genesis_time)
    return LedgerParams(
        challenge_slug=settings.slug,
        genesis_unix=genesis,
        epoch_seconds=settings.epoch_seconds,
        epochs_per_round=settings.epochs_per_round,
        vest_rounds=settings.vest_rounds,
        forgive_per_epoch=settings.forgive_per_epoch,
    )


@frozen
class LedgerClock:
    """The ledger's epochs and rounds against one drand chain (module doc)."""

    chain: ChainInfo
    params: LedgerParams

    @classmethod
    def of(cls, settings: CoordinatorSettings, chain: ChainInfo) -> LedgerClock:
        """The clock of ``settings`` over ``chain``."""
        return cls(chain, ledger_params(settings, chain))

    def round_of(self, t: int) -> int:
        """The ledger round of unix time ``t``."""
        return self.params.round_of(t)

    def time_of_drand(self, d: int) -> int:
        """The chain time of drand round ``d`` in whole seconds (round 0: genesis)."""
        return math.floor(self.chain.time_of(max(d, 1)))

    def start_of_epoch(self, epoch: int) -> int:
        """Unix time at which chain epoch ``epoch`` begins."""
        return self.params.genesis_unix + epoch * self.params.epoch_seconds

    def start_of_round(self, ledger_round: int) -> int:
        """Unix time at which ``ledger_round`` begins."""
        return self.start_of_epoch(ledger_round * self.params.epochs_per_round)

    def final_marks(self, at: int) -> tuple[int, int, int]:
        """``(ledger_round, vesting_round, released_round)`` of a round final at ``at``."""
        ledger_round = self.round_of(at)
        return (ledger_round, *self.marks(ledger_round))

    def marks(self, ledger_round: int) -> tuple[int, int]:
        """``(vesting_round, released_round)``: the first drand rounds at which a round final
        in ``ledger_round`` is VESTING and RELEASED."""
        vesting = round_at_or_after(self.chain, self.start_of_round(ledger_round + 1))
        released_at = self.start_of_round(ledger_round + self.params.vest_rounds)
        return vesting, round_at_or_after(self.chain, released_at)
