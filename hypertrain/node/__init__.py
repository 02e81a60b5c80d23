"""hypertrain-node: the volunteer compute node (see :mod:`hypertrain.node.main`).

Modules: ``errors`` (the node's one error tree, rooted at :class:`NodeError`), ``nodefile``
(the node directory and node.json), ``identity`` (coordinator URL, origin, which key),
``probe`` (hardware class and tools), ``cache`` (content-addressed inputs, re-hashed before
use), ``client`` (the compute routes over HTTP, every body a class of
:mod:`hypertrain.compute.wire`), ``client_answers`` (how the client reads their answers),
``offer`` (does a leased job fit this node, and its result post; pure), ``runner`` (the
loop), ``job`` (one leased job: inputs, score, post), ``runner_types`` (the loop's settings
and records), ``main`` (the command line).
"""

from hypertrain.node.cache import InputCache
from hypertrain.node.client import NodeClient
from hypertrain.node.client_answers import PostAnswer
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
from hypertrain.node.offer import fit, result_post
from hypertrain.node.runner import NodeRunner
from hypertrain.node.runner_types import (
    CAPABILITY_REFRESH,
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
    "result_post",
    "save_record",
]
