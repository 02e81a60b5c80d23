"""The drand beacon: hypertrain's only clock and its source of unbiasable randomness.

Chains and rounds (``chain``), BLS verification and local signing (``bls``), the local
development chain and its drand-shaped HTTP app (``local``), the round <-> time clock
(``clock``), the relay client (``relays``), ingestion into the store (``ingest``) and the
pusher service with its sinks (``pusher``, ``sinks``).
"""

from hypertrain.beacon.bls import (
    LocalSigner,
    check_round,
    drand_chain_hash,
    local_chain_hash,
    verify_round,
)
from hypertrain.beacon.chain import (
    DST_G1,
    QUICKNET,
    SCHEME_UNCHAINED_G1,
    BeaconRound,
    ChainInfo,
    InvalidRound,
)
from hypertrain.beacon.check import QUICKNET_VECTORS, live_check, offline_check
from hypertrain.beacon.clock import BeaconClock, BeaconClockStatistics
from hypertrain.beacon.errors import (
    BeaconDisagreement,
    BeaconError,
    BeaconUnavailable,
    ChainMismatch,
    PusherGaveUp,
    SinkAuthError,
    SinkRefused,
    SinkUnavailable,
    TokenFileError,
)
from hypertrain.beacon.ingest import (
    IngestResult,
    get_round,
    ingest_round,
    latest_round,
    store_round,
)
from hypertrain.beacon.local import (
    LOCAL_BEACON_ID,
    LocalChain,
    LocalChainError,
    LocalChainSource,
    local_chain_app,
)
from hypertrain.beacon.pusher import (
    BeaconSource,
    Pusher,
    PusherStatistics,
    TickRecord,
    rounds_to_push,
)
from hypertrain.beacon.relays import DEFAULT_RELAYS, RelayClient
from hypertrain.beacon.sinks import BeaconSink, HttpSink, StoreSink, read_token

__all__ = [
    "DEFAULT_RELAYS",
    "DST_G1",
    "LOCAL_BEACON_ID",
    "QUICKNET",
    "QUICKNET_VECTORS",
    "SCHEME_UNCHAINED_G1",
    "BeaconClock",
    "BeaconClockStatistics",
    "BeaconDisagreement",
    "BeaconError",
    "BeaconRound",
    "BeaconSink",
    "BeaconSource",
    "BeaconUnavailable",
    "ChainInfo",
    "ChainMismatch",
    "HttpSink",
    "IngestResult",
    "InvalidRound",
    "LocalChain",
    "LocalChainError",
    "LocalChainSource",
    "LocalSigner",
    "Pusher",
    "PusherGaveUp",
    "PusherStatistics",
    "RelayClient",
    "SinkAuthError",
    "SinkRefused",
    "SinkUnavailable",
    "StoreSink",
    "TickRecord",
    "TokenFileError",
    "check_round",
    "drand_chain_hash",
    "get_round",
    "ingest_round",
    "latest_round",
    "live_check",
    "local_chain_app",
    "local_chain_hash",
    "offline_check",
    "read_token",
    "rounds_to_push",
    "store_round",
    "verify_round",
]
