"""``hypertrain-miner run`` without the CLI: resolve the run, check everything, mine N rounds.

:func:`run_miner` is the composition root of the client:

1. picks the run (``run_id`` or the only one at ``GET /v1/runs``) and verifies its
   RunManifest envelope (signature, ``run_id = sha256(JCS(body))``, signer == ``owner_hotkey``
   when configured);
2. calls :func:`hypertrain.trainer.determinism.configure` with ``reference_spec.env`` (torch is
   imported for the first time there, never before);
3. opens the local dataset (``data_dir``) and checks its ``merkle_root``, ``n_samples`` and
   ``shard_sha256_root`` against the manifest's ``dataset`` section; without ``data_dir`` a
   :class:`~hypertrain.miner.datacache.RemoteDataset` fetches, before each round's training,
   the shards it needs from the run's registered dataset (checked against the same section);
4. mines rounds ``start .. start + rounds - 1`` with a :class:`RoundRunner`, pruning
   artifacts older than ``E_vest_rounds + 2`` rounds, while an
   :class:`~hypertrain.miner.auditserve.AuditServer` beside it (same nursery) serves the
   segment audits of this miner's rounds;
5. a :class:`~hypertrain.miner.disputes.DisputeFollower` beside both reruns, disputes and
   bisects every round whose verdict is a MISMATCH (issue 14);
6. after the last round keeps serving until the audit of every round it posted leaves for is
   settled (the server's bounds: the serve deadline's wall time plus ``serve_grace_seconds``),
   and following until each such round's verdict, and its dispute if any, is settled (the
   follower's bounds: ``verdict_grace_seconds``, ``dispute_grace_seconds``).

Test-only keywords (never reachable from the CLI or ``miner.toml``): ``faults`` injects a
training fault or glitch (:mod:`hypertrain.miner.faults`); ``run_sync`` runs the follower's
recomputations (worker threads by default; virtual-time tests pass
:func:`nurseries.run_inline`).

A coordinator that cannot be reached at the start ends the client (exit 1: most likely a wrong
``api``); once mining, each phase of a round retries until its own deadline
(:mod:`hypertrain.miner.round`), and the audit server and the dispute follower retry at their
next poll, so no transient error ends the run.

Default ``start``: the oldest round the journal left unfinished, else the run's newest round,
else 0. Fatal problems raise :class:`~hypertrain.miner.errors.MinerFatal` or one of its
subclasses (the CLI prints one line and exits 2); a 4xx answer no route's contract expects
becomes one too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import httpx
import trio

from hypertrain.datasets.errors import DatasetError
from hypertrain.datasets.manifest import MANIFEST_FILE, DatasetManifest, load_record
from hypertrain.datasets.reader import Dataset
from hypertrain.miner.answers import RunInfo
from hypertrain.miner.artifacts import prune
from hypertrain.miner.auditserve import AuditServer, Served
from hypertrain.miner.client import CoordinatorClient
from hypertrain.miner.config import MinerConfig
from hypertrain.miner.datacache import RemoteDataset
from hypertrain.miner.disputes import DisputeFollower, DisputeRecord
from hypertrain.miner.errors import ApiError, MinerFatal
from hypertrain.miner.faults import NO_FAULTS, Faults
from hypertrain.miner.honeypot import HoneypotMode
from hypertrain.miner.journal import Journal
from hypertrain.miner.progress import Progress
from hypertrain.miner.round import (
    DEFAULT_SETTINGS,
    Hook,
    Prepare,
    RoundOutcome,
    RoundRunner,
    RoundSettings,
    RoundStatus,
    transient,
)
from hypertrain.miner.startstate import StartStateSource
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.envelope import verify
from hypertrain.protocol.errors import HypertrainError
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import ReferenceEnv, RunManifest
from hypertrain.trainer.errors import TrainerError
from nurseries import GaveUp, RunSync, retry

__all__ = ["Summary", "check_dataset", "run_miner"]


@attrs.frozen
class Summary:
    """What a run did: the final JSON on stdout, and the exit status.

    Its JSON has the derived ``ok`` besides the fields, so it is written by :meth:`to_json`,
    each round by the converter.
    """

    run_id: str
    hotkey: str
    rounds: tuple[RoundOutcome, ...]
    served: tuple[Served, ...] = ()
    """The StateServes this run posted and the coordinator stored (segment audits)."""
    disputes: tuple[DisputeRecord, ...] = ()
    """How each MISMATCHed round's rerun and dispute ended (issue 14)."""

    @property
    def exit_code(self) -> int:
        return 0 if all(r.status is RoundStatus.UPLOADED for r in self.rounds) else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "hotkey": self.hotkey,
            "rounds": [unstructure(r) for r in self.rounds],
            "served": [unstructure(s) for s in self.served],
            "disputes": [unstructure(d) for d in self.disputes],
            "ok": self.exit_code == 0,
        }


async def resolve_run(client: CoordinatorClient, run_id: str | None) -> str:
    """``run_id``, or the only run the API lists."""
    if run_id is not None:
        return run_id
    runs = await client.list_runs()
    if len(runs) != 1:
        raise MinerFatal(f"the API lists {len(runs)} runs; set run_id in the config")
    return runs[0].run_id


async def _reach(
    client: CoordinatorClient, run_id: str | None, settings: RoundSettings
) -> tuple[str, RunInfo]:
    """The run's id and view, retried as every phase retries (:func:`transient`) for
    ``settings.start_wait_seconds``; the last failure itself when the daemon stays away."""
    deadline = trio.current_time() + settings.start_wait_seconds

    async def reach() -> tuple[str, RunInfo]:
        found = await resolve_run(client, run_id)
        return found, await client.get_run(found)

    try:
        return await retry(reach, deadline=deadline, transient=transient, backoff=settings.backoff)
    except GaveUp as e:
        last = e.last  # the last failure, with its own cause: what the exit line names
        raise last from last.__cause__


def verify_manifest(envelope: Mapping[str, Any], run_id: str, owner: str | None) -> RunManifest:
    """The run's RunManifest from its envelope, checked (module docstring step 1)."""
    try:
        verified = verify(envelope, signer_allowed=lambda t, _: t == "RunManifest")
    except HypertrainError as e:
        raise MinerFatal(f"run {run_id}: manifest envelope does not verify: {e}") from e
    manifest = verified.message
    if not isinstance(manifest, RunManifest) or manifest.run_id() != run_id:
        raise MinerFatal(f"run {run_id}: the manifest is not this run's")
    if owner is not None and verified.envelope.signer != owner:
        raise MinerFatal(f"run {run_id}: manifest signed by {verified.envelope.signer}, not owner")
    return manifest


def check_dataset(config: MinerConfig, manifest: RunManifest) -> Dataset:
    """Open ``data_dir`` (re-hashing its shards) and match it against ``manifest.dataset``."""
    if config.data_dir is None:
        raise MinerFatal("data_dir is not configured")
    try:
        record = load_record(DatasetManifest, config.data_dir / MANIFEST_FILE)
        dataset = Dataset.open(config.data_dir)
    except (DatasetError, HypertrainError, OSError) as e:
        raise MinerFatal(f"data_dir {config.data_dir}: {e}") from e
    spec = manifest.dataset
    mine = (dataset.merkle_root, dataset.n_samples, record.shard_sha256_root)
    want = (spec.merkle_root, spec.n_samples, spec.shard_sha256_root)
    for name, have, need in zip(
        ("merkle_root", "n_samples", "shard_sha256_root"), mine, want, strict=True
    ):
        if have != need:
            raise MinerFatal(f"data_dir {config.data_dir}: {name} {have} != the manifest's {need}")
    if dataset.seq_len != manifest.model.seq_len:
        raise MinerFatal(f"data_dir: seq_len {dataset.seq_len} != {manifest.model.seq_len}")
    return dataset


async def _threaded(fn: Callable[..., Any], *args: Any) -> Any:
    """A recomputation in a worker thread (abandoned on cancellation: it only computes)."""
    return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)


def _default_configure(env: ReferenceEnv) -> None:
    from hypertrain.trainer.determinism import configure

    configure(env)


async def _mine_and_serve(
    runner: RoundRunner, server: AuditServer, follower: DisputeFollower, rounds: range
) -> tuple[RoundOutcome, ...]:
    """Mine ``rounds`` with ``server`` and ``follower`` running beside, then wait for the
    audits and disputes to settle (unless the manifest names no auditor: then nothing is
    drawn, served or disputed).

    An error of the round loop is taken out of the nursery before it closes and raised as
    itself (the tasks beside are cancelled); an error of those propagates as the nursery's
    group.
    """
    outcomes: list[RoundOutcome] = []
    failure: Exception | None = None
    keep = runner.manifest.verify.E_vest_rounds + 2
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        await nursery.start(follower.run)
        try:
            for w in rounds:
                outcomes.append(await runner.mine_round(w))
                prune(runner.config.workdir, w, keep)
            if runner.manifest.auditors:  # a run that names no auditor is never audited
                await server.wait_settled()
                await follower.wait_settled()
        except Exception as e:  # re-raised below, once the server is cancelled
            failure = e
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return tuple(outcomes)


async def run_miner(
    config: MinerConfig,
    keypair: Keypair,
    *,
    rounds: int = 1,
    start: int | None = None,
    mode: HoneypotMode = HoneypotMode.HONEST,
    transport: httpx.AsyncBaseTransport | None = None,
    progress: Progress | None = None,
    hook: Hook | None = None,
    settings: RoundSettings = DEFAULT_SETTINGS,
    configure: Callable[[ReferenceEnv], None] = _default_configure,
    faults: Faults = NO_FAULTS,
    run_sync: RunSync | None = None,
) -> Summary:
    """Mine ``rounds`` rounds (module docstring)."""
    progress = progress or Progress()
    client = CoordinatorClient(config.api, transport=transport)
    try:
        run_id, run = await _reach(client, config.run_id, settings)
        manifest = verify_manifest(run.manifest_envelope, run_id, config.owner_hotkey)
        try:
            configure(manifest.reference_spec.env)
        except TrainerError as e:
            raise MinerFatal(f"determinism: {e}") from e
        if config.data_dir is None:
            remote = RemoteDataset(client, keypair, run_id, manifest, config.workdir)
            samples: Callable[[Any], Any] = remote.samples
            prepare: Prepare | None = remote.ensure
        else:
            samples, prepare = check_dataset(config, manifest).samples, None
        journal = Journal.load(config.workdir)
        if start is None:
            pending = journal.unfinished()
            opened = [r.w for r in run.rounds]
            start = pending[0] if pending else max(opened, default=0)
        runner = RoundRunner(
            config=config,
            keypair=keypair,
            client=client,
            manifest=manifest,
            run_id=run_id,
            journal=journal,
            samples=samples,
            prepare=prepare,
            progress=progress,
            state_source=StartStateSource(manifest, run_id, client, keypair, config.state_source),
            mode=mode,
            hook=hook,
            settings=settings,
            faults=faults,
        )
        server = AuditServer(runner)
        follower = DisputeFollower(runner, run_sync=run_sync or _threaded)
        outcomes = await _mine_and_serve(runner, server, follower, range(start, start + rounds))
        return Summary(run_id, keypair.ss58, outcomes, server.served, follower.records)
    except ApiError as e:
        if e.status >= 500:
            raise
        raise MinerFatal(str(e)) from e
    finally:
        await client.aclose()
