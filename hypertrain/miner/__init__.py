"""The miner client (``hypertrain-miner``, spec/protocol.md section 5.6).

Importing this package does not import torch: the modules that do (``training``,
``trainstep``) are imported lazily, after ``trainer.determinism.configure``.

- :mod:`~hypertrain.miner.config`: ``miner.toml`` and ``HYPERTRAIN_MINER_*`` overrides;
- :mod:`~hypertrain.miner.journal`: the fsynced restart journal and durable writes;
- :mod:`~hypertrain.miner.artifacts`: per-round files under ``workdir/rounds/{w}``;
- :mod:`~hypertrain.miner.client`: the HTTP calls (injectable transport, named timeouts);
- :mod:`~hypertrain.miner.startstate`: round start states, TH-checked;
- :mod:`~hypertrain.miner.round`: the per-round state machine;
- :mod:`~hypertrain.miner.training`, :mod:`~hypertrain.miner.trainstep`: the TRAIN phase;
- :mod:`~hypertrain.miner.honeypot`: the honeypot modes (spec 6.5);
- :mod:`~hypertrain.miner.session`: :func:`run_miner`, the composition root;
- :mod:`~hypertrain.miner.main`: the command line.
"""

from hypertrain.miner.client import ApiError, ClientTimeouts, CoordinatorClient
from hypertrain.miner.config import ConfigError, MinerConfig, load_config
from hypertrain.miner.honeypot import HoneypotMode
from hypertrain.miner.journal import Journal, write_durable
from hypertrain.miner.progress import Progress
from hypertrain.miner.round import (
    MinerProtocolError,
    RoundOutcome,
    RoundRunner,
    RoundSettings,
    RoundStatus,
)
from hypertrain.miner.session import MinerFatal, Summary, run_miner

__all__ = [
    "ApiError",
    "ClientTimeouts",
    "ConfigError",
    "CoordinatorClient",
    "HoneypotMode",
    "Journal",
    "MinerConfig",
    "MinerFatal",
    "MinerProtocolError",
    "Progress",
    "RoundOutcome",
    "RoundRunner",
    "RoundSettings",
    "RoundStatus",
    "Summary",
    "load_config",
    "run_miner",
    "write_durable",
]
