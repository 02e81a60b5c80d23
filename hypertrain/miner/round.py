"""One round of the miner (spec/protocol.md sections 1.3 steps 2-6, 5.4-5.6), restart-safe.

:meth:`RoundRunner.mine_round` drives round ``w`` through::

    wait (D >= d_assign, bounded by d_commit) -> verify RoundOpen -> roster? (else SKIPPED)
    -> check assignment_hash -> Accept -> load start state -> train -> compress
    -> Commit (verify Receipt) -> POST leaves -> upload grant + PUT -> DeltaManifest (UPLOADED)

and consults the journal first: a phase already recorded is never redone. Artifacts of a phase
are on disk before its journal line (:mod:`hypertrain.miner.artifacts`), so after a crash the
commit is re-posted from ``commit.json`` (the 409 of a duplicate hands back the stored receipt),
training is never repeated once ``trained`` is recorded, and the upload is re-requested and
re-PUT (the server is idempotent).

Every call of a phase is retried (:meth:`RoundRunner.retry`, the project's one primitive
:func:`nurseries.retry`: exponential backoff with full jitter, a 503's ``Retry-After``
honoured) while it fails transiently (:func:`transient`: a network error or a 5xx answer)
until the phase's own deadline: ``d_commit`` for the start state, the dataset, Accept and
Commit; ``d_upload`` for the leaves, the upload and the DeltaManifest (each a beacon round,
carried over to the Trio clock from the last D the miner saw, plus
``deadline_grace_seconds``). So a daemon restart within a phase costs nothing. A phase whose
deadline passes first fails the round (FAILED, journal kept) and the client goes on with the
next one: a transient error never ends the miner; only a refusal (4xx) can.

``hook(point, w)`` is called at each phase boundary and after each inner step (point ``step``);
tests raise from it, or pause in it, to simulate a crash. Protocol violations by the coordinator
raise :class:`~hypertrain.miner.errors.MinerProtocolError` (the CLI exits 2); a round that ends
early (skipped, aborted, excluded, failed) ends in its :class:`RoundOutcome`.
"""

from __future__ import annotations

import enum
import hashlib
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, ParamSpec, TypeVar

import attrs
import httpx
import trio

from hypertrain.miner.answers import AlreadyCommitted, RoundView
from hypertrain.miner.artifacts import RoundDir
from hypertrain.miner.client import CoordinatorClient
from hypertrain.miner.config import MinerConfig
from hypertrain.miner.errors import (
    ApiError,
    DataFetchError,
    MinerError,
    MinerProtocolError,
    StartStateError,
    UploadRefused,
)
from hypertrain.miner.faults import NO_FAULTS, Faults
from hypertrain.miner.honeypot import HoneypotMode
from hypertrain.miner.journal import Journal
from hypertrain.miner.progress import Progress
from hypertrain.miner.startstate import StartStateSource
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.envelope import Envelope, check_shape, seal, verify
from hypertrain.protocol.errors import HypertrainError
from hypertrain.protocol.jcs import body_digest
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.messages import (
    Accept,
    Chunk,
    Commit,
    DeltaManifest,
    LeafPreimage,
    Message,
    Receipt,
    RoundOpen,
)
from hypertrain.rounds.assignment import Assignment, assign
from nurseries import Backoff, GaveUp, retry

__all__ = [
    "DEFAULT_SETTINGS",
    "DRIVER_VERSION",
    "Hook",
    "RoundOutcome",
    "RoundRunner",
    "RoundSettings",
    "RoundStatus",
    "transient",
]

T = TypeVar("T")
P = ParamSpec("P")

DRIVER_VERSION: Final = "cpu"
Hook = Callable[[str, int], None]
"""``(point, w)``: called at each phase boundary and inner ``step`` (a test hook)."""
Prepare = Callable[[Sequence[int], int], Awaitable[None]]
"""``(sample ids, D)``: makes the samples available before training (the remote dataset)."""


class RoundStatus(enum.StrEnum):
    """How a round ended for this miner."""

    UPLOADED = "UPLOADED"
    SKIPPED = "SKIPPED"
    EXCLUDED = "EXCLUDED"
    ABORTED = "ABORTED"
    FAILED = "FAILED"


@attrs.frozen
class RoundOutcome:
    """The result of one round: its status and a one-line detail (``""`` when none).

    Its JSON (the converter's) is ``{"w", "status", "detail"}``, an item of the summary.
    """

    w: int
    status: RoundStatus
    detail: str


@attrs.frozen
class RoundSettings:
    """Named bounds of the round loop (seconds)."""

    start_wait_seconds: float = 120.0
    """How long the miner retries reaching the daemon at its start (network errors and 5xx,
    as every phase does) before it exits 1: a miner started while the daemon restarts waits."""
    open_wait_seconds: float = 3600.0
    """How long to wait for round ``w`` to be opened at all (the view answering 404)."""
    stall_grace_seconds: float = 120.0
    """Extra time beyond ``(d_commit - D) * period`` before a stalled beacon gives up."""
    serve_grace_seconds: float = 120.0
    """Extra time beyond a round's ``(serve_deadline - D) * period`` before the audit server
    stops waiting for that round's audit to settle (a stalled beacon, an unreachable API)."""
    verdict_grace_seconds: float = 120.0
    """Extra time beyond a round's ``(serve_deadline - D) * period`` before the dispute
    follower stops waiting for this miner's verdict (:mod:`hypertrain.miner.disputes`)."""
    dispute_grace_seconds: float = 600.0
    """How long the dispute follower waits, once nothing is asked of the miner, for a
    dispute to move (the auditor's Bisect, the referee, the timeout) beyond the current
    stage's ``deadline_round`` (estimated at ``period`` seconds a round) before giving up."""
    backoff: Backoff = attrs.field(factory=lambda: Backoff(initial=0.5, maximum=10.0))
    """The waits between two tries of a call that failed transiently (full jitter); the
    command line takes its maximum from miner.toml's ``retry_max_seconds``."""
    deadline_grace_seconds: float = 10.0
    """Added to a phase deadline's estimated time (a beacon running late) before its retries
    stop; the coordinator refuses a post that is really late (4xx), which ends them too."""
    step_retry_seconds: float = 10.0
    """How long one dispute step retries before it is left to the follower's next poll."""


DEFAULT_SETTINGS: Final = RoundSettings()


class _Abort(MinerError):
    """Ends round ``w`` early with ``status``; :meth:`RoundRunner.mine_round` catches it."""

    def __init__(self, status: RoundStatus, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


@attrs.define
class RoundRunner:
    """Runs rounds of one run for one miner (module docstring)."""

    config: MinerConfig
    keypair: Keypair
    client: CoordinatorClient
    manifest: RunManifest
    run_id: str
    journal: Journal
    samples: Callable[[Any], Any]
    progress: Progress
    state_source: StartStateSource
    mode: HoneypotMode = HoneypotMode.HONEST
    hook: Hook | None = None
    settings: RoundSettings = DEFAULT_SETTINGS
    prepare: Prepare | None = None
    """Called with the assigned sample ids and D before training (fetches remote shards)."""
    faults: Faults = NO_FAULTS
    """Test-only fault injection (:mod:`hypertrain.miner.faults`)."""
    draw: Callable[[], float] = random.random
    """The retries' jitter source (tests pass a seeded one)."""
    _seen: tuple[int, float] | None = attrs.field(default=None, init=False)
    """The last beacon round D the coordinator told, and the Trio time it was told."""

    def observe(self, d: int) -> None:
        """The coordinator says D is ``d`` now (a view, a Receipt): the phase clocks follow."""
        self._seen = (d, trio.current_time())

    def time_of(self, d: int, ro: RoundOpen) -> float:
        """The Trio time by which beacon round ``d`` is due, plus the grace (module doc).

        Estimated from the last D seen; before any, from the round's ``d_open`` (D is at
        least that once the round is open, so the estimate is late, never early)."""
        period = self.manifest.beacon.period
        seen_d, seen_at = self._seen if self._seen is not None else (ro.d_open, trio.current_time())
        return seen_at + (d - seen_d) * period + self.settings.deadline_grace_seconds

    async def retry(
        self,
        call: Callable[[], Awaitable[T]],
        deadline: float,
        on_retry: Callable[[Exception, float], None] | None = None,
    ) -> T:
        """``call()``, retried while it fails transiently until ``deadline`` (Trio time);
        :class:`nurseries.GaveUp` then, chained to the last failure (module doc).
        ``on_retry(error, delay)`` hears of each wait (a progress line)."""
        return await retry(
            call, deadline=deadline, transient=transient, backoff=self.settings.backoff,
            draw=self.draw, on_retry=on_retry,
        )  # fmt: skip

    async def _phase(self, call: Callable[[], Awaitable[T]], deadline: float) -> T:
        """:meth:`retry` for a step of the round itself. A 400 answered once ``deadline`` is
        due by the miner's own estimate (less the grace) is the window closing while the
        daemon was away (Accept and Commit are sealed to expire at ``d_commit``): the round
        FAILED, as when the retries run out, and the miner goes on. A 400 before then is the
        miner's own fault and ends it."""
        try:
            return await self.retry(call, deadline)
        except ApiError as e:
            due = deadline - self.settings.deadline_grace_seconds
            if e.status == 400 and trio.current_time() >= due:
                raise _Abort(RoundStatus.FAILED, f"refused after the deadline: {e}") from e
            raise

    def reached(self, point: str, w: int) -> None:
        """Call the test hook at ``point`` of round ``w`` (when one is set)."""
        if self.hook is not None:
            self.hook(point, w)

    def record(self, w: int, phase: str, **extra: Any) -> None:
        """Journal ``phase`` of round ``w`` (fsynced), write its progress line, call the hook."""
        self.journal.append(w, phase, **extra)
        self.progress.phase(w, phase, **extra)
        self.reached(phase, w)

    async def mine_round(self, w: int) -> RoundOutcome:
        """Take round ``w`` to its end for this miner (module docstring)."""
        done = self.journal.phases(w)
        if "manifest_posted" in done:
            return RoundOutcome(w, RoundStatus.UPLOADED, "already uploaded")
        if "skipped" in done:
            return RoundOutcome(w, RoundStatus.SKIPPED, str(done["skipped"].get("reason", "")))
        if "aborted" in done:
            event = done["aborted"]
            status = RoundStatus(event.get("status", RoundStatus.ABORTED))
            return RoundOutcome(w, status, str(event.get("reason", "")))
        try:
            return await self._run(w, RoundDir(self.config.workdir, w))
        except (GaveUp, httpx.TransportError) as e:
            # The coordinator stayed unreachable until the phase's deadline (restarting, say):
            # the round fails and the client goes on with the next one, its journal kept.
            abort = _Abort(RoundStatus.FAILED, f"{type(e).__name__}: {e}")
        except ApiError as e:
            if e.status < 500:
                raise
            abort = _Abort(RoundStatus.FAILED, str(e))
        except _Abort as e:
            abort = e
        if abort.status is RoundStatus.FAILED:
            self.progress.phase(w, "failed", reason=repr(abort.detail))
        elif abort.status is not RoundStatus.SKIPPED:  # skipped is journaled already
            self.record(w, "aborted", reason=abort.detail, status=abort.status.value)
        return RoundOutcome(w, abort.status, abort.detail)

    async def _run(self, w: int, rd: RoundDir) -> RoundOutcome:
        done = self.journal.phases(w)
        if "trained" not in done:
            await self._accept_and_train(w, rd, accepted="accepted" in done)
        round_open = structure(RoundOpen, rd.read_json("round_open.json"))
        commit_env = check_shape(rd.read_json("commit.json"))
        if "committed" not in self.journal.phases(w):
            await self._commit(w, rd, round_open, commit_env)
        if self.journal.phases(w)["committed"].get("status") == RoundStatus.EXCLUDED:
            raise _Abort(RoundStatus.EXCLUDED, "commit received after d_audit")
        commit = structure(Commit, commit_env.body)
        d_upload = self.time_of(round_open.d_upload, round_open)
        if "leaves" not in self.journal.phases(w):
            await self._post_leaves(w, rd, commit, d_upload)
        payload = rd.read_bytes("delta.bin")
        if "uploaded" not in self.journal.phases(w):
            await self._upload(w, commit, payload, d_upload)
        await self._post_manifest(w, commit, payload, round_open, d_upload)
        return RoundOutcome(w, RoundStatus.UPLOADED, "")

    # -- waiting, verifying, accepting -----------------------------------------------------

    def _coord_message(self, w: int, raw: Mapping[str, Any], type_name: str) -> Message:
        """The body of a K_coord envelope of ``type_name`` for this run; protocol error if not."""
        coord = self.manifest.coord_pubkey
        try:
            verified = verify(
                raw,
                expected_run_id=self.run_id,
                signer_allowed=lambda t, s: t == type_name and s == coord,
            )
        except HypertrainError as e:
            raise MinerProtocolError(f"round {w}: {type_name} does not verify: {e}") from e
        return verified.message

    def _verify_round_open(self, w: int, raw: Mapping[str, Any]) -> RoundOpen:
        message = self._coord_message(w, raw, "RoundOpen")
        if not isinstance(message, RoundOpen) or message.w != w:
            raise MinerProtocolError(f"round {w}: the view's RoundOpen is not for round {w}")
        return message

    async def _wait_assigned(self, w: int, accepted: bool) -> tuple[RoundView, RoundOpen]:
        """Poll the view until D >= d_assign with an assignment (and a start state for w > 0).

        Gives up (ABORTED) when D >= d_commit before accepting, when the round is never
        opened within ``open_wait_seconds``, or when the beacon stalls past d_commit's time.
        """
        self.progress.phase(w, "waiting")
        period = self.manifest.beacon.period
        open_deadline = trio.current_time() + self.settings.open_wait_seconds
        deadline: float | None = None
        while True:
            view = await self._poll_view(w)
            if view is None:
                if trio.current_time() >= open_deadline:
                    raise _Abort(RoundStatus.ABORTED, "round was never opened")
            else:
                ro = self._verify_round_open(w, view.round_open)
                now = view.now_round
                if deadline is None:
                    rounds_left = max(ro.d_commit - now, 0)
                    deadline = (
                        trio.current_time()
                        + rounds_left * period
                        + self.settings.stall_grace_seconds
                    )
                if now >= ro.d_commit and not accepted:
                    raise _Abort(RoundStatus.ABORTED, f"D={now} >= d_commit before accepting")
                assigned = now >= ro.d_assign and view.assignment is not None
                if assigned and self.state_source.ready(w, view):
                    return view, ro
                if trio.current_time() >= deadline:
                    raise _Abort(RoundStatus.ABORTED, "beacon stalled before the assignment")
            await trio.sleep(self.config.poll_seconds)

    async def _poll_view(self, w: int) -> RoundView | None:
        try:
            view = await self.client.round_view(self.run_id, w)
        except httpx.TransportError as e:
            self.progress.phase(w, "poll-error", error=type(e).__name__)
            return None
        except ApiError as e:
            if e.status < 500:
                raise
            self.progress.phase(w, "poll-error", status=e.status)
            return None
        if view is not None:
            self.observe(view.now_round)
        return view

    def _my_assignment(self, w: int, view: RoundView, ro: RoundOpen) -> Assignment:
        hotkey = self.keypair.ss58
        sig_hex = view.assignment_beacon_signature
        if sig_hex is None:
            raise MinerProtocolError(f"round {w}: the view has no assignment beacon signature")
        try:
            ours = assign(
                self.manifest, self.run_id, w, bytes.fromhex(sig_hex), ro.roster, base=view.base
            )
        except (ValueError, HypertrainError) as e:
            raise MinerProtocolError(f"round {w}: cannot derive the assignment: {e}") from e
        mine = [a for a in ours if a.hotkey == hotkey]
        published = [a for a in view.assignment or () if a.hotkey == hotkey]
        if len(mine) != 1 or len(published) != 1:
            raise MinerProtocolError(f"round {w}: no published assignment for {hotkey}")
        if (published[0].assignment_hash, published[0].samples) != (
            mine[0].assignment_hash,
            mine[0].samples,
        ):
            raise MinerProtocolError(
                f"round {w}: published assignment_hash {published[0].assignment_hash} "
                f"!= derived {mine[0].assignment_hash}"
            )
        return mine[0]

    async def _accept_and_train(self, w: int, rd: RoundDir, *, accepted: bool) -> None:
        view, ro = await self._wait_assigned(w, accepted)
        if self.keypair.ss58 not in {entry.hotkey for entry in ro.roster}:
            self.record(w, "skipped", reason="not in the RoundOpen roster")
            raise _Abort(RoundStatus.SKIPPED, "not in the RoundOpen roster")
        mine = self._my_assignment(w, view, ro)
        self.progress.phase(w, "assigned", slot=mine.slot, samples=len(mine.samples))
        self.reached("assigned", w)
        d_commit = self.time_of(ro.d_commit, ro)
        prepare = self.prepare
        if prepare is not None:
            try:
                await self._phase(lambda: prepare(mine.samples, view.now_round), d_commit)
            except DataFetchError as e:
                raise MinerProtocolError(f"round {w}: dataset: {e}") from e
        try:
            theta_start = await self._phase(lambda: self.state_source.load(w, view, ro), d_commit)
        except StartStateError as e:
            refused = e.__cause__
            if isinstance(refused, ApiError) and refused.status == 403:
                # rostered when the round opened, removed or blacklisted since
                raise _Abort(RoundStatus.ABORTED, f"start state refused: {refused.detail}") from e
            raise
        if not accepted:
            await self._accept(w, mine, ro)
        from hypertrain.miner.trainstep import train_and_save  # imports torch: after configure

        await train_and_save(self, w, rd, ro, mine, theta_start)
        self.record(w, "trained")

    async def _accept(self, w: int, mine: Assignment, ro: RoundOpen) -> None:
        image = self.config.image_digest or self.manifest.reference_spec.image_digest
        body = Accept(w, self.keypair.ss58, mine.assignment_hash, image, DRIVER_VERSION, 1)
        envelope = seal(self.keypair, "Accept", self.run_id, body, ro.d_commit)
        d_commit = self.time_of(ro.d_commit, ro)
        try:
            await self._phase(lambda: self.client.accept(self.run_id, envelope), d_commit)
        except ApiError as e:
            past = e.status == 409 and await self.retry(
                lambda: self._already_past_assigned(w), d_commit
            )
            if past:
                pass  # accepted before a crash: the server's status moved on
            elif e.status in (403, 409):  # 403: removed or blacklisted since the round opened
                raise _Abort(RoundStatus.ABORTED, f"Accept refused: {e.detail}") from e
            elif e.status == 422:
                raise MinerProtocolError(f"round {w}: Accept refused: {e}") from e
            else:
                raise
        self.record(w, "accepted")

    async def _already_past_assigned(self, w: int) -> bool:
        view = await self.client.round_view(self.run_id, w)
        for miner in view.miners if view is not None else ():
            if miner.hotkey == self.keypair.ss58:
                return miner.status != "ASSIGNED"
        return False

    # -- commit and after ------------------------------------------------------------------

    async def _commit(self, w: int, rd: RoundDir, ro: RoundOpen, envelope: Envelope) -> None:
        self.reached("before_commit", w)
        d_commit = self.time_of(ro.d_commit, ro)
        try:
            answer = await self._phase(lambda: self.client.commit(self.run_id, envelope), d_commit)
        except ApiError as e:
            if e.status == 409:
                raise _Abort(RoundStatus.ABORTED, f"Commit refused: {e.detail}") from e
            raise
        self.reached("commit_posted", w)
        receipt = self._verify_receipt(w, answer.receipt, envelope.body)
        if isinstance(answer, AlreadyCommitted):
            status = "EXCLUDED" if receipt.received_round >= ro.d_audit else "COMMITTED"
        else:
            status = answer.status
        rd.write_json("receipt.json", answer.receipt)
        self.observe(receipt.received_round)
        self.record(w, "committed", status=status, received_round=receipt.received_round)

    def _verify_receipt(
        self, w: int, raw: Mapping[str, Any], commit_body: Mapping[str, Any]
    ) -> Receipt:
        receipt = self._coord_message(w, raw, "Receipt")
        if not isinstance(receipt, Receipt) or receipt.w != w:
            raise MinerProtocolError(f"round {w}: the Receipt is not for round {w}")
        if receipt.commit_hash != body_digest(commit_body):
            raise MinerProtocolError(f"round {w}: Receipt commit_hash is not our Commit's")
        return receipt

    async def _post_leaves(self, w: int, rd: RoundDir, commit: Commit, deadline: float) -> None:
        stored = rd.read_json("preimages.json")
        preimages = [unstructure(structure(LeafPreimage, p)) for p in stored]
        payload = {"w": w, "hotkey": self.keypair.ss58, "preimages": preimages}
        answer = await self._guarded(
            w, "leaves", deadline, self.client.post_leaves, self.run_id, payload
        )
        if answer.leaves_root != commit.leaves_root:
            raise MinerProtocolError(f"round {w}: the server's leaves_root is not ours")
        self.record(w, "leaves")

    async def _upload(self, w: int, commit: Commit, payload: bytes, deadline: float) -> None:
        url = await self._guarded(
            w, "upload grant", deadline, self.client.upload_grant, self.run_id, w,
            self.keypair.ss58, commit.delta_hash,
        )  # fmt: skip
        try:
            await self._guarded(
                w, "upload", deadline, self.client.put_payload, url, payload,
                allow_file=self.config.allow_file_upload,
            )  # fmt: skip
        except UploadRefused as e:
            raise MinerProtocolError(f"round {w}: {e}") from e
        self.reached("put_done", w)
        self.record(w, "uploaded", size=len(payload))

    async def _post_manifest(
        self, w: int, commit: Commit, payload: bytes, ro: RoundOpen, deadline: float
    ) -> None:
        step = self.config.chunk_bytes
        chunks = tuple(
            Chunk(off, len(payload[off : off + step]), _sha(payload[off : off + step]))
            for off in range(0, len(payload), step)
        )
        body = DeltaManifest(
            w, self.keypair.ss58, commit.delta_hash, f"objects/{commit.delta_hash}",
            len(payload), "ht-dense-int8-v1", chunks,
        )  # fmt: skip
        envelope = seal(self.keypair, "DeltaManifest", self.run_id, body, ro.d_final)
        await self._guarded(
            w, "DeltaManifest", deadline, self.client.post_delta, self.run_id, envelope
        )
        self.record(w, "manifest_posted")

    async def _guarded(
        self,
        w: int,
        what: str,
        deadline: float,
        fn: Callable[P, Awaitable[T]],
        *a: P.args,
        **k: P.kwargs,
    ) -> T:
        """Call with retries until ``deadline``; a 409 (window closed, not COMMITTED) aborts
        the round, the deadline passing fails it."""
        try:
            return await self._phase(lambda: fn(*a, **k), deadline)
        except ApiError as e:
            if e.status == 409:
                raise _Abort(RoundStatus.ABORTED, f"{what} refused: {e.detail}") from e
            if e.status in (400, 403, 422):
                raise MinerProtocolError(f"round {w}: {what} refused: {e}") from e
            raise _Abort(RoundStatus.FAILED, f"{what}: {e}") from e
        except GaveUp as e:
            raise _Abort(RoundStatus.FAILED, f"{what}: {e}") from e


def transient(error: Exception) -> float | None:
    """The miner's retry rule: a network error (timeouts included) or a 5xx answer is worth
    another try, after the answer's ``Retry-After`` if any; anything else is final."""
    if isinstance(error, httpx.TransportError):
        return 0.0
    if isinstance(error, ApiError) and error.status >= 500:
        return error.retry_after or 0.0
    return None


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
