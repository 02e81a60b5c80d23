"""hypertrain-node: the volunteer compute node (see :mod:`hypertrain.node.main`).

Modules: ``errors`` (the node's one error tree, rooted at :class:`NodeError`), ``nodefile``
(the node directory and node.json), ``identity`` (coordinator URL, origin, which key),
``probe`` (hardware class and tools), ``cache`` (content-addressed inputs, re-hashed before
use), ``client`` (the compute routes over HTTP), ``offer`` (a leased job, parsed and checked,
and its result body; pure), ``runner`` (the loop), ``main`` (the command line).
"""

from hypertrain.node.cache import InputCache, InputSpec
from hypertrain.node.client import NodeClient, PostAnswer
from hypertrain.node.errors import (
    BadOffer,
    Disabled,
    IdentityError,
    InputMismatch,
    NodeClientError,
    NodeError,
    NodeFatal,
    NodeFileError,
    Refused,
    Unauthorized,
    Unreachable,
)
from hypertrain.node.identity import choose_key, coordinator_url, origin_of
from hypertrain.node.nodefile import NodeRecord, load_record, node_dir, save_record
from hypertrain.node.offer import JobOffer, fit, result_body
from hypertrain.node.runner import (
    CAPABILITY_REFRESH,
    NodeRunner,
    NodeStatistics,
    Probed,
    RunnerSettings,
)

__all__ = [
    "CAPABILITY_REFRESH",
    "BadOffer",
    "Disabled",
    "IdentityError",
    "InputCache",
    "InputMismatch",
    "InputSpec",
    "JobOffer",
    "NodeClient",
    "NodeClientError",
    "NodeError",
    "NodeFatal",
    "NodeFileError",
    "NodeRecord",
    "NodeRunner",
    "NodeStatistics",
    "PostAnswer",
    "Probed",
    "Refused",
    "RunnerSettings",
    "Unauthorized",
    "Unreachable",
    "choose_key",
    "coordinator_url",
    "fit",
    "load_record",
    "node_dir",
    "origin_of",
    "result_body",
    "save_record",
]
