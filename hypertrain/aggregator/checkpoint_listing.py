"""``GET /v1/runs/{id}/checkpoints``: the listing of a run's published checkpoints.

One class for both sides: the daemon writes its answer through :class:`Listing` and the one
converter (:mod:`hypertrain.coordinator.tables.checkpoints`), and the checkpoint client
(:mod:`.checkpoint_client`) reads it back through the same class, so the two cannot disagree
and ``GET /openapi.json`` documents exactly what both use.
"""

from __future__ import annotations

from attrs import field, frozen

from hypertrain.aggregator.checkpoint import FILES, Status, file_hashes
from hypertrain.protocol.validators import (
    FieldError,
    hex64,
    instance_of,
    list_of,
    one_of_literal,
    u_int,
)

__all__ = ["Entry", "Listing"]


@frozen
class Entry:
    """One checkpoint of the listing."""

    w: int = field(validator=u_int)
    rounds: tuple[int, ...] = field(validator=list_of(u_int))
    status: Status = field(validator=one_of_literal(Status))
    theta_hash: str = field(validator=hex64)
    files: dict[str, str] = field(validator=file_hashes(FILES))
    written_round: int = field(validator=u_int)
    """D when the daemon wrote it (a provisional one is rewritten after a rollback)."""

    def __attrs_post_init__(self) -> None:
        if len(self.rounds) != 2 or self.rounds[1] != self.w or self.rounds[0] > self.w:
            raise FieldError("rounds", "must be [w_start, w] with 0 <= w_start <= w")


@frozen
class Listing:
    """``GET /v1/runs/{id}/checkpoints``: the run's checkpoints, by increasing ``w``."""

    run_id: str = field(validator=hex64)
    checkpoints: tuple[Entry, ...] = field(validator=list_of(instance_of(Entry)))

    def __attrs_post_init__(self) -> None:
        ws = [entry.w for entry in self.checkpoints]
        if ws != sorted(set(ws)):
            raise FieldError("checkpoints", "must be sorted by w, each w once")
