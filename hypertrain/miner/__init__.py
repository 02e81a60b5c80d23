"""The miner client (``hypertrain-miner``, spec/protocol.md section 5.6).

Importing this package does not import torch: the modules that do (``training``,
``trainstep``) are imported lazily, after ``trainer.determinism.configure``.

- :mod:`~hypertrain.miner.errors`: the miner's one error tree and the exit status of each;
- :mod:`~hypertrain.miner.config`: ``miner.toml`` and ``HYPERTRAIN_MINER_*`` overrides;
- :mod:`~hypertrain.miner.journal`: the fsynced restart journal and durable writes;
- :mod:`~hypertrain.miner.artifacts`: per-round files under ``workdir/rounds/{w}``;
- :mod:`~hypertrain.miner.answers`: the coordinator's answers the miner reads, typed;
- :mod:`~hypertrain.miner.client`: the HTTP calls (injectable transport, named timeouts);
- :mod:`~hypertrain.miner.startstate`: round start states, TH-checked;
- :mod:`~hypertrain.miner.round`: the per-round state machine;
- :mod:`~hypertrain.miner.training`, :mod:`~hypertrain.miner.trainstep`: the TRAIN phase;
- :mod:`~hypertrain.miner.honeypot`: the honeypot modes (spec 6.5);
- :mod:`~hypertrain.miner.serves`: the StateServe of a kept leaf state (pure);
- :mod:`~hypertrain.miner.auditserve`: the task that answers segment audits;
- :mod:`~hypertrain.miner.disputeplan`: what to do about a MISMATCH, step by step (pure);
- :mod:`~hypertrain.miner.rerun`: the miner's own recomputations for a rerun and a dispute;
- :mod:`~hypertrain.miner.disputes`: the task that reruns, disputes and bisects, and
  :mod:`~hypertrain.miner.disputesteps`: its steps (the requests, the journal lines);
- :mod:`~hypertrain.miner.faults`: test-only fault injection into the miner's training;
- :mod:`~hypertrain.miner.session`: :func:`run_miner`, the composition root;
- :mod:`~hypertrain.miner.main`: the command line.
"""

from hypertrain.miner.auditserve import AuditServer, Served
from hypertrain.miner.client import ClientTimeouts, CoordinatorClient
from hypertrain.miner.config import MinerConfig, load_config
from hypertrain.miner.disputes import DisputeFollower, DisputeRecord
from hypertrain.miner.errors import (
    ApiError,
    ConfigError,
    DataFetchError,
    MinerError,
    MinerFatal,
    MinerProtocolError,
    ServeError,
    StartStateError,
    UploadRefused,
)
from hypertrain.miner.faults import NO_FAULTS, Faults
from hypertrain.miner.honeypot import HoneypotMode
from hypertrain.miner.journal import Journal, write_durable
from hypertrain.miner.progress import Progress
from hypertrain.miner.round import RoundOutcome, RoundRunner, RoundSettings, RoundStatus
from hypertrain.miner.session import Summary, run_miner

__all__ = [
    "NO_FAULTS",
    "ApiError",
    "AuditServer",
    "ClientTimeouts",
    "ConfigError",
    "CoordinatorClient",
    "DataFetchError",
    "DisputeFollower",
    "DisputeRecord",
    "Faults",
    "HoneypotMode",
    "Journal",
    "MinerConfig",
    "MinerError",
    "MinerFatal",
    "MinerProtocolError",
    "Progress",
    "RoundOutcome",
    "RoundRunner",
    "RoundSettings",
    "RoundStatus",
    "ServeError",
    "Served",
    "StartStateError",
    "Summary",
    "UploadRefused",
    "load_config",
    "run_miner",
    "write_durable",
]
