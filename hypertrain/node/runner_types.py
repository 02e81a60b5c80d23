"""The node loop's settings and records: what :class:`~hypertrain.node.runner.NodeRunner` is
given and what it reports.

- **Given**: :class:`RunnerSettings`, the loop's named timings (:data:`DEFAULT_SETTINGS`;
  :data:`CAPABILITY_REFRESH` seconds between two probes), a probe answering :class:`Probed`,
  and the ``score`` and ``say`` callables (:data:`Score`).
- **The node's own line**: :func:`standing_line`, its leaderboard row in words.
- **The download bound**: :func:`download_bound`, what is left of a lease for its inputs once
  the scorer's kill time is kept for scoring.
- **The register line**: :func:`registered_line`, who the node is, where its key is saved and,
  for a key on probation, how many agreed answers still earn nothing.
- **Reported**: what one turn did (:data:`Turn`), and :class:`NodeStatistics` (with the
  :class:`LastJob`), a frozen record whose JSON is the converter's, ``null`` for what is not
  known yet.

Pure: no I/O, no trio.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Annotated, Final, Literal

import attrs
from cattrs.gen import override

from hypertrain.compute.wire import LeaseGrant, RegisterAnswer, Standing
from hypertrain.node.cache import DEFAULT_MAX_BYTES
from hypertrain.scoring.outcome import ScoreOutcome
from hypertrain.scoring.registry import Challenge

__all__ = [
    "CAPABILITY_REFRESH",
    "DEFAULT_SETTINGS",
    "LastJob",
    "NodeStatistics",
    "Probe",
    "Probed",
    "RunnerSettings",
    "Say",
    "Score",
    "Turn",
    "download_bound",
    "registered_line",
    "standing_line",
]

CAPABILITY_REFRESH: Final = 600.0
"""Seconds after which the next loop turn probes the machine again (node document)."""

Turn = Literal["empty", "posted", "skipped", "abandoned", "disabled"]


@attrs.frozen
class Probed:
    """What a probe found: the hardware class, capability ids, and the tools' one-liner."""

    hardware: str
    capabilities: tuple[str, ...]
    described: str


Probe = Callable[[], Awaitable[Probed]]
Score = Callable[[Challenge, Mapping[str, Path]], Awaitable[ScoreOutcome]]
Say = Callable[[str], None]


@attrs.frozen(kw_only=True)
class RunnerSettings:
    """The loop's named timings (seconds)."""

    capability_refresh: float = CAPABILITY_REFRESH
    backoff_start: float = 1.0
    backoff_cap: float = 60.0
    min_poll_interval: float = 1.0
    """Least time between the starts of two lease polls."""
    disabled_min_wait: float = 5.0
    disabled_recheck: float = 600.0
    """Longest single sleep while disabled; the lease is asked again after it."""
    input_timeout: float = 600.0
    """All of a job's inputs must be in the cache within this (and within
    :func:`download_bound`)."""
    cache_max_bytes: int = DEFAULT_MAX_BYTES
    """The input cache's size bound (``--cache-max-mb``)."""
    lease_wait_ms: int | None = None
    """``wait_ms`` of the lease poll; None: the server's default (25 s)."""
    standing_every: float | None = 600.0
    """Seconds between two of the node's own leaderboard lines (``--leaderboard-every``), the
    first this long after registering; None: never."""

    def disabled_wait(self, left: float) -> float:
        """The next sleep while disabled, ``left`` seconds before the re-enable time: at least
        ``disabled_min_wait``, at most ``disabled_recheck``."""
        return min(self.disabled_recheck, max(self.disabled_min_wait, left))


DEFAULT_SETTINGS: Final = RunnerSettings()


def download_bound(offer: LeaseGrant, challenge: Challenge, now: float) -> float:
    """Seconds the inputs of ``offer`` may take at wall time ``now`` (seconds): what is left of
    the lease once the scorer's kill time (the registry's, which the sandbox enforces) is kept
    for scoring; zero or less when nothing is left."""
    return (offer.deadline_ms - challenge.kill_after_ms) / 1000 - now


def standing_line(row: Standing) -> str:
    """The node's leaderboard row in words (one line, the handle not repeated)."""
    agreement = "-" if row.agreement_ppm is None else f"{row.agreement_ppm / 10_000:.1f} %"
    strikes = "1 strike" if row.strikes == 1 else f"{row.strikes} strikes"
    return (
        f"leaderboard: rank {row.rank}, {row.compute_credits} compute credits,"
        f" {row.jobs_done} jobs done, agreement {agreement}, {strikes}"
    )


@attrs.frozen
class LastJob:
    id: str
    challenge: str
    ok: bool
    wall_ms: int
    posted: str

    @classmethod
    def of(cls, offer: LeaseGrant, outcome: ScoreOutcome, posted: str) -> LastJob:
        return cls(offer.copy_id, offer.challenge, outcome.ok, outcome.wall_ms, posted)


_SHOWN = override(omit_if_default=False)


@attrs.frozen
class NodeStatistics:
    """Counters for the volunteer and the ``--json`` summary (its JSON is the converter's, with
    ``null`` for what is not known yet)."""

    node_id: Annotated[str | None, _SHOWN]
    handle: Annotated[str | None, _SHOWN]
    jobs: int
    """Jobs scored."""
    posted: int
    """Results the coordinator answered (200, 409 or 410)."""
    accepted: int
    """Results answered 200."""
    skipped: int
    abandoned: int
    last_job: Annotated[LastJob | None, _SHOWN]


def registered_line(answer: RegisterAnswer, url: str, minted: bool, path: Path) -> str:
    """The node's line after a register (module doc)."""
    saved = "new key saved in" if minted else "key saved in"
    line = f"registered as {answer.handle} (node {answer.node_id}) at {url}; {saved} {path}"
    if answer.probation:  # minted where a node was disabled by its strikes in the last day
        line += f"; on probation: the next {answer.probation} agreed answers earn nothing"
    return line
