"""The answers of the miner's round routes and the auditors' job routes, as the classes the
one converter writes (``GET /openapi.json`` documents them; :mod:`.miner`, :mod:`.serves` and
:mod:`.worker` build them)."""

from __future__ import annotations

from typing import Literal

from attrs import field, frozen

from hypertrain.protocol.envelope import Envelope
from hypertrain.protocol.validators import hex64, ss58, u_int

__all__ = [
    "Accepted",
    "CommitRefused",
    "Committed",
    "HandedBack",
    "LeaseExtended",
    "LeavesTaken",
    "Reran",
    "StateStored",
    "UploadGrant",
    "Uploaded",
]


@frozen
class Accepted:
    """``POST .../accept``: the miner holds its slot of round ``w``."""

    w: int = field(validator=u_int)
    hotkey: str = field(validator=ss58)
    status: Literal["ACCEPTED"]
    slot: int = field(validator=u_int)


@frozen
class Committed:
    """``POST .../commit``: the Commit taken (or EXCLUDED: late), and K_coord's Receipt."""

    status: Literal["COMMITTED", "EXCLUDED"]
    receipt: Envelope


@frozen
class CommitRefused:
    """``POST .../commit`` 409 for a Commit re-posted byte for byte: its stored Receipt."""

    detail: str
    receipt: Envelope


@frozen
class Reran:
    """``POST .../rerun``: how the rerun classified the mismatch."""

    w: int = field(validator=u_int)
    hotkey: str = field(validator=ss58)
    classification: str


@frozen
class LeavesTaken:
    """``POST .../leaves``: the preimages Merkle to the committed ``leaves_root``."""

    w: int = field(validator=u_int)
    hotkey: str = field(validator=ss58)
    leaves_root: str = field(validator=hex64)


@frozen
class UploadGrant:
    """``POST .../uploads``: where to ``PUT`` the object's bytes (the URL is the credential)."""

    method: Literal["PUT"]
    sha256: str = field(validator=hex64)
    url: str


@frozen
class Uploaded:
    """``POST .../delta``: the DeltaManifest is taken, the miner's delta UPLOADED."""

    w: int = field(validator=u_int)
    hotkey: str = field(validator=ss58)
    status: Literal["UPLOADED"]


@frozen
class StateStored:
    """``POST .../state``: the challenged state at step ``t`` is served."""

    challenge_hash: str = field(validator=hex64)
    t: int = field(validator=u_int)
    stored: Literal[True]


@frozen
class LeaseExtended:
    """``POST /v1/worker/jobs/{id}/heartbeat``: the lease's new last round."""

    id: str
    lease_expires_round: int = field(validator=u_int)


@frozen
class HandedBack:
    """``POST /v1/worker/jobs/{id}/fail``: the job queued again, or failed for good."""

    id: str
    state: Literal["queued", "failed"]
