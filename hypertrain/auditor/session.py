"""``hypertrain-auditor`` without the command line: check the run, configure, audit.

:func:`run_auditor` is the composition root of the program:

1. reads the run's RunManifest envelope (``GET /v1/runs/{id}``) and verifies it (signature,
   ``run_id = sha256(JCS(body))``); this auditor's key must be in ``manifest.auditors``;
2. calls :func:`hypertrain.trainer.determinism.configure` with ``reference_spec.env`` (torch is
   imported for the first time there, never before), exactly as the miner does: a process that
   cannot match the pinned env is refused;
3. builds the :class:`~hypertrain.auditor.worker.AuditorWorker` (client, dataset cache under
   ``data_dir``, replays in a worker thread) and runs one job (``once``), or the forever loop
   until ``stop`` fires, with the :class:`~hypertrain.auditor.casework.DisputeWorker`'s two
   loops beside it (answering the disputes against its verdicts, refereeing the others; same
   client, dataset cache and worker threads).

``fault`` is for tests only (no command line or file reaches it): the auditor's audit replays
and its answers as a dispute party both come from training with that one op miscomputed
(:class:`~hypertrain.auditor.replayer.TorchReplayer`); its referee rulings stay honest.

Fatal problems raise :class:`~hypertrain.auditor.errors.AuditorFatal` (the CLI prints one line
and exits 2).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import httpx
import trio

from hypertrain.auditor.casework import DisputeWorker
from hypertrain.auditor.client import DEFAULT_SETTINGS, AuditorClient, ClientSettings
from hypertrain.auditor.datacache import DatasetCache
from hypertrain.auditor.errors import ApiError, AuditorFatal
from hypertrain.auditor.progress import Progress
from hypertrain.auditor.worker import DEFAULT_WORKER_SETTINGS, AuditorWorker, WorkerSettings
from hypertrain.protocol.envelope import verify
from hypertrain.protocol.errors import HypertrainError
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import ReferenceEnv, RunManifest
from hypertrain.trainer.errors import TrainerError
from nurseries import RunSync

if TYPE_CHECKING:  # torch: only after configure
    from hypertrain.auditor.replayer import TorchReplayer
    from hypertrain.trainer.fault import Fault

__all__ = ["Options", "default_configure", "prepare_run", "run_auditor", "verify_manifest"]

Configure = Callable[[ReferenceEnv], object]


@attrs.frozen
class Options:
    """What the command line asked for."""

    api: str
    run_id: str
    token: str
    keypair: Keypair
    data_dir: Path
    once: bool = False
    json_lines: bool = False


def default_configure(env: ReferenceEnv) -> None:
    from hypertrain.trainer.determinism import configure

    configure(env)


def verify_manifest(envelope: object, run_id: str) -> RunManifest:
    """The run's RunManifest from its envelope, checked (module docstring step 1)."""
    try:
        checked = verify(envelope, signer_allowed=lambda t, _: t == "RunManifest")
    except HypertrainError as e:
        raise AuditorFatal(f"run {run_id}: manifest envelope does not verify: {e}") from e
    manifest = checked.message
    if not isinstance(manifest, RunManifest) or manifest.run_id() != run_id:
        raise AuditorFatal(f"run {run_id}: the manifest is not this run's")
    return manifest


async def prepare_run(
    client: AuditorClient, run_id: str, keypair: Keypair, configure: Configure
) -> RunManifest:
    """Steps 1 and 2 of the module docstring."""
    try:
        envelope = await client.manifest_envelope(run_id)
    except ApiError as e:
        raise AuditorFatal(f"run {run_id}: {e}") from e
    manifest = verify_manifest(envelope, run_id)
    if keypair.ss58 not in manifest.auditors:
        raise AuditorFatal(f"{keypair.ss58} is not an auditor of run {run_id}")
    try:
        configure(manifest.reference_spec.env)
    except TrainerError as e:
        raise AuditorFatal(f"determinism: {e}") from e
    return manifest


def _replayers(fault: Fault | None) -> Callable[[], TorchReplayer]:
    def make() -> TorchReplayer:
        from hypertrain.auditor.replayer import TorchReplayer  # torch: only after configure

        return TorchReplayer(fault=fault)

    return make


def _threaded() -> RunSync:
    # abandon_on_cancel: a shutdown does not wait for a replay in progress (the job is handed
    # back and the thread dies with the process)
    return functools.partial(trio.to_thread.run_sync, abandon_on_cancel=True)


async def run_auditor(
    options: Options,
    *,
    stop: Callable[[], Awaitable[object]],
    transport: httpx.AsyncBaseTransport | None = None,
    configure: Configure = default_configure,
    progress: Progress | None = None,
    settings: WorkerSettings = DEFAULT_WORKER_SETTINGS,
    client_settings: ClientSettings = DEFAULT_SETTINGS,
    run_sync: RunSync | None = None,
    fault: Fault | None = None,
) -> int:
    """Audit (module docstring); returns the exit status: 0 a normal end (``stop``, or with
    ``once`` a verdict posted or nothing to do), 1 the one job failed or the coordinator was
    unreachable. ``stop`` returns when the program should end (a shutdown signal). ``fault``:
    tests only (module docstring)."""
    progress = progress or Progress(json_lines=options.json_lines)
    client = AuditorClient(
        options.api, options.token, transport=transport, settings=client_settings
    )
    try:
        manifest = await prepare_run(client, options.run_id, options.keypair, configure)
        run_sync = run_sync or _threaded()
        data = DatasetCache(options.data_dir, client.get_object)
        replayer = _replayers(fault)
        audit_with = functools.partial(
            AuditorWorker,
            client=client,
            keypair=options.keypair,
            run_id=options.run_id,
            data=data,
            progress=progress,
            settings=settings,
            run_sync=run_sync,
        )
        worker = audit_with(replayer=replayer)
        honest = audit_with(replayer=_replayers(None))  # the referee's re-audits: no fault
        disputes = DisputeWorker(
            client=client,
            keypair=options.keypair,
            manifest=manifest,
            data=data,
            progress=progress,
            party=replayer,
            referee=_replayers(None),
            reaudit=honest.reaudit,
            settings=settings,
            run_sync=run_sync,
        )
        status: list[int] = []
        async with trio.open_nursery() as nursery:

            async def stopper() -> None:
                await stop()
                progress.note("stopping")
                nursery.cancel_scope.cancel()

            nursery.start_soon(stopper, name="auditor shutdown")
            if options.once:
                status.append(await _once(worker, progress))
            else:
                nursery.start_soon(disputes.run_party, name="auditor disputes: party")
                nursery.start_soon(disputes.run_referee, name="auditor disputes: referee")
                await worker.run()
            nursery.cancel_scope.cancel()
        return status[0] if status else 0
    finally:
        with trio.CancelScope(shield=True):
            await client.aclose()


async def _once(worker: AuditorWorker, progress: Progress) -> int:
    report = await worker.audit_next()
    if report is None:
        progress.note("idle: no job to audit")
        return 0
    return 0 if report.state == "done" else 1
