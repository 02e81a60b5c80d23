"""Where a round's start state comes from, checked against the RoundOpen ``theta_hash``.

Round 0 starts from the deterministic init (:func:`hypertrain.trainer.params.init_params`).
Later rounds start from the published blob (``pack_state`` format, theta section):

- ``state_source`` unset: ``GET /v1/objects/{state_sha256}`` on the API with signed headers,
  where ``state_sha256`` is the round view's published start-state blob (its sha256 is checked);
- ``state_source`` a directory: the file ``{state_source}/{theta_hash}``;
- ``state_source`` an http(s) base: ``GET {state_source}/{theta_hash}``.

Either way ``TH(theta) == RoundOpen.theta_hash`` must hold, else
:class:`~hypertrain.miner.errors.StartStateError` (a MinerFatal: the client's one-line exit 2):
a miner never trains from a state it cannot prove. A network error or a 5xx answer is not one:
it propagates as itself, and the round retries the load until ``d_commit``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from hypertrain.miner.answers import RoundView
from hypertrain.miner.client import CoordinatorClient
from hypertrain.miner.errors import ApiError, StartStateError
from hypertrain.protocol.errors import HypertrainError
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.messages import RoundOpen
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.trainer.params import F32Array, init_params
from hypertrain.trainer.state import unpack_state

__all__ = ["StartStateSource"]


class StartStateSource:
    """Loads and TH-checks the start state of a round (module docstring)."""

    def __init__(
        self,
        manifest: RunManifest,
        run_id: str,
        client: CoordinatorClient,
        keypair: Keypair,
        state_source: str | None,
    ) -> None:
        self.manifest, self.run_id = manifest, run_id
        self.client, self.keypair, self.source = client, keypair, state_source

    def ready(self, w: int, view: RoundView) -> bool:
        """Whether the view says enough to load round ``w``'s start state."""
        return w == 0 or self.source is not None or view.state_sha256 is not None

    async def load(self, w: int, view: RoundView, ro: RoundOpen) -> dict[str, F32Array]:
        """The start theta of round ``w`` (StartStateError when unavailable or wrong)."""
        if w == 0:
            theta = init_params(self.manifest.model)
        else:
            blob = await self._fetch(view, ro)
            try:
                theta = unpack_state(blob).theta
            except HypertrainError as e:
                raise StartStateError(f"round {w}: start state blob is malformed: {e}") from e
        actual = th_hex(theta)
        if actual != ro.theta_hash:
            raise StartStateError(
                f"round {w}: start state TH {actual} != RoundOpen theta_hash {ro.theta_hash}"
            )
        return theta

    async def _fetch(self, view: RoundView, ro: RoundOpen) -> bytes:
        source = self.source
        try:
            if source is None:
                sha = view.state_sha256
                if sha is None:
                    raise StartStateError("the round view names no start state blob")
                blob = await self.client.get_object(self.keypair, self.run_id, sha, view.now_round)
                if hashlib.sha256(blob).hexdigest() != sha:
                    raise StartStateError(f"start state blob does not hash to {sha}")
                return blob
            if source.startswith(("http://", "https://")):
                return await self.client.get_url(f"{source.rstrip('/')}/{ro.theta_hash}")
            return (Path(source) / ro.theta_hash).read_bytes()
        except ApiError as e:
            if e.status >= 500:
                raise  # transient: the round retries it until d_commit
            raise StartStateError(f"cannot fetch the start state: {e}") from e
        except OSError as e:
            raise StartStateError(f"cannot read the start state: {e}") from e
