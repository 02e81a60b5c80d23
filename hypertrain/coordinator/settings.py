"""The coordinator's settings: what the routes need to know about this deployment.

Built by the daemon (:mod:`hypertrain.daemon.settings`) from the operator guide's environment
variables, an optional TOML file and CLI flags; tests build it directly. Paths are stored as
given; nothing is read at construction (token and key files are read per request, see
:mod:`hypertrain.coordinator.tokens` and :meth:`Coordinator.coord_keypair
<hypertrain.coordinator.context.Coordinator.coord_keypair>`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final, Literal

import attrs

from hypertrain.compute.networks import parse_proxies
from hypertrain.protocol.validators import is_label
from hypertrain.rounds.checkpoints import DEFAULT_CHECKPOINT_EVERY

__all__ = [
    "DEFAULT_BODY_LIMIT",
    "DEFAULT_EPOCHS_PER_ROUND",
    "DEFAULT_EPOCH_SECONDS",
    "DEFAULT_FORGIVE_PER_EPOCH",
    "DEFAULT_HELDOUT_SAMPLES",
    "DEFAULT_SLUG",
    "DEFAULT_VEST_ROUNDS",
    "NO_ASSERTION",
    "ComputeNetworks",
    "CoordinatorSettings",
]

DEFAULT_SLUG: Final = "hypertrain"
NO_ASSERTION: Final = "NOASSERTION"
"""SPDX's value for "the publisher makes no assertion": the default license and dataset terms."""
DEFAULT_EPOCH_SECONDS: Final = 4320
DEFAULT_EPOCHS_PER_ROUND: Final = 1
DEFAULT_VEST_ROUNDS: Final = 10
DEFAULT_FORGIVE_PER_EPOCH: Final = 1
DEFAULT_HELDOUT_SAMPLES: Final = 64
"""Holdout samples the daemon evaluates each theta on (the first ones of the split)."""
ComputeNetworks = Literal["address", "per-key"]
"""How compute requests are grouped into networks for pairing and minting: ``address`` (the
default: the client address's /24 or /48) or ``per-key`` (each node key its own network: the
demo's loopback test mode only; the daemon refuses it without ``--beacon local``)."""
DEFAULT_BODY_LIMIT: Final = 1024 * 1024
"""Largest request body accepted (1 MiB, the Cortex proxy's limit); larger is 413."""


def _optional_path(value: object) -> Path | None:
    if value is None or isinstance(value, Path):
        return value
    if isinstance(value, str):
        return Path(value)
    raise TypeError(f"expected a path or None, got {type(value).__name__}")


def _positive(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{attribute.name} must be an integer >= 1, got {value!r}")


def _non_negative(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 0:
        raise ValueError(f"{attribute.name} must be an integer >= 0, got {value!r}")


def _permille(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or not 0 <= value <= 1000:
        raise ValueError(f"{attribute.name} must be an integer in 0..1000, got {value!r}")


def _proxies(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    try:
        parse_proxies(value)
    except ValueError as e:
        raise ValueError(f"{attribute.name}: {e}") from e


def _genesis(_instance: object, attribute: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and (type(value) is not int or value < 0):
        raise ValueError(f"{attribute.name} must be unix seconds >= 0 or unset, got {value!r}")


def _label(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not is_label(value):
        raise ValueError(f"{attribute.name} must be non-empty printable text, got {value!r:.80}")


def _slug(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not value or not value.isprintable() or " " in value:
        raise ValueError(f"{attribute.name} must be a non-empty token, got {value!r}")


@attrs.frozen(kw_only=True)
class CoordinatorSettings:
    """Deployment settings of one coordinator (spec section 9.2); all validated on creation."""

    state_dir: Path = attrs.field(converter=Path)
    """Holds ``challenge.db`` and ``objects/``."""
    slug: str = attrs.field(default=DEFAULT_SLUG, validator=_slug)
    """The challenge id; internal routes require it in ``X-Platform-Challenge-Slug``."""
    master_url: str | None = None
    """The Cortex master (metagraph); None when not configured."""
    internal_token_file: Path | None = attrs.field(default=None, converter=_optional_path)
    admin_token_file: Path | None = attrs.field(default=None, converter=_optional_path)
    worker_token_file: Path | None = attrs.field(default=None, converter=_optional_path)
    coord_key_file: Path | None = attrs.field(default=None, converter=_optional_path)
    """K_coord's seed file (``HYPERTRAIN_COORD_KEY_FILE``)."""
    owner_hotkey: str | None = None
    """SS58 of K_owner, the only key allowed to sign a RunManifest."""
    epoch_seconds: int = attrs.field(default=DEFAULT_EPOCH_SECONDS, validator=_positive)
    epochs_per_round: int = attrs.field(default=DEFAULT_EPOCHS_PER_ROUND, validator=_positive)
    vest_rounds: int = attrs.field(default=DEFAULT_VEST_ROUNDS, validator=_positive)
    forgive_per_epoch: int = attrs.field(default=DEFAULT_FORGIVE_PER_EPOCH, validator=_non_negative)
    genesis_unix: int | None = attrs.field(default=None, validator=_genesis)
    """Clock origin of epochs; None: the beacon chain's genesis."""
    body_limit: int = attrs.field(default=DEFAULT_BODY_LIMIT, validator=_positive)
    holdout_dir: Path | None = attrs.field(default=None, converter=_optional_path)
    """The operator's private dataset directory (``manifest.json`` + holdout files); when set,
    the daemon computes the held-out loss of every theta (:mod:`hypertrain.coordinator.
    heldout_service`). Never served."""
    heldout_samples: int = attrs.field(default=DEFAULT_HELDOUT_SAMPLES, validator=_positive)
    """How many holdout samples (the first ones) each held-out loss averages over."""
    compute_credit: int = attrs.field(default=1, validator=_non_negative)
    """Credits per accepted copy (``HYPERTRAIN_COMPUTE_CREDIT``)."""
    compute_wait_ms: int = attrs.field(default=20_000, validator=_non_negative)
    """A scoring step's window before the fallback scores it (``HYPERTRAIN_COMPUTE_WAIT_MS``)."""
    compute_pool: int = attrs.field(factory=lambda: os.cpu_count() or 1, validator=_positive)
    """Concurrent fallback scorers (``HYPERTRAIN_COMPUTE_POOL``; default: the cores)."""
    compute_audit_permille: int = attrs.field(default=50, validator=_permille)
    """Of the scoring steps settled by agreement, how many per thousand the beacon draws for a
    trusted re-score by the fallback pool (``HYPERTRAIN_COMPUTE_AUDIT_PERMILLE``, 0..1000)."""
    compute_pair_min_age_s: int = attrs.field(default=3600, validator=_non_negative)
    """Two node keys younger than this are never given copies of one job, and a young key or
    one on probation only goes beside an established node
    (``HYPERTRAIN_COMPUTE_PAIR_MIN_AGE_S``; :mod:`hypertrain.compute.pairing`)."""
    compute_mint_per_minute: int = attrs.field(default=10, validator=_positive)
    """Node keys minted per source network per minute (``HYPERTRAIN_COMPUTE_MINT_PER_MINUTE``)."""
    compute_probation_answers: int = attrs.field(default=10, validator=_non_negative)
    """Agreed answers a key on probation gives unpaid (``HYPERTRAIN_COMPUTE_PROBATION_ANSWERS``;
    :mod:`hypertrain.compute.sybils`)."""
    compute_networks: ComputeNetworks = attrs.field(
        default="address", validator=attrs.validators.in_(("address", "per-key"))
    )
    """``HYPERTRAIN_COMPUTE_NETWORKS`` (:data:`ComputeNetworks`)."""
    trusted_proxies: str = attrs.field(default="", validator=_proxies)
    """Addresses or CIDR blocks of reverse proxies whose ``X-Forwarded-For`` names the client
    (``HYPERTRAIN_TRUSTED_PROXIES``; :mod:`hypertrain.compute.networks`); empty: none."""
    trace_samples: int = attrs.field(default=32, validator=_positive)
    """Samples in each scoring trace (public: from the train split; hidden: the holdout)."""
    hidden_slices: int = attrs.field(default=4, validator=_positive)
    """Slices of a hidden scoring step, each its own two-copy job; a node gets at most one slice
    of a hidden window (``HYPERTRAIN_HIDDEN_SLICES``; at most ``trace_samples``)."""
    hidden_rotate_rounds: int = attrs.field(default=10, validator=_positive)
    """Rounds a hidden window lasts before it moves to fresh holdout samples
    (``HYPERTRAIN_HIDDEN_ROTATE_ROUNDS``)."""
    checkpoint_every: int = attrs.field(default=DEFAULT_CHECKPOINT_EVERY, validator=_positive)
    """A checkpoint every this many rounds, and at a run's last round
    (``HYPERTRAIN_CHECKPOINT_EVERY``; :mod:`hypertrain.rounds.checkpoints`)."""
    checkpoint_license: str = attrs.field(default=NO_ASSERTION, validator=_label)
    """The license checkpoints publish the model under (``HYPERTRAIN_CHECKPOINT_LICENSE``, an
    SPDX id is best; default ``NOASSERTION``, SPDX's "the publisher says nothing")."""
    dataset_name: str = attrs.field(default=NO_ASSERTION, validator=_label)
    """The training data's name in checkpoints (``HYPERTRAIN_DATASET_NAME``)."""
    dataset_license: str = attrs.field(default=NO_ASSERTION, validator=_label)
    """The training data's license in checkpoints (``HYPERTRAIN_DATASET_LICENSE``)."""
    dataset_attribution: str = attrs.field(default=NO_ASSERTION, validator=_label)
    """Who the training data is owed to, in checkpoints (``HYPERTRAIN_DATASET_ATTRIBUTION``)."""

    @property
    def db_path(self) -> Path:
        """``state_dir/challenge.db``."""
        return self.state_dir / "challenge.db"

    @property
    def objects_dir(self) -> Path:
        """``state_dir/objects``."""
        return self.state_dir / "objects"
