"""Issue 18's fault suite, outages: miners ride out a daemon outage of 3 s in each of their
phases, with real processes on real sockets.

The network of :mod:`tests.e2e.crashnet` (a ``hypertrain-daemon`` with its local chain, two
``hypertrain-miner run`` children that try again within a second, four rounds without
auditors), its rounds wide enough that an outage need not swallow a deadline: a 14 s training
window holds an outage (3 s, then the new daemon's start-up: 1-2 s on a quiet machine) and the
phases after it. Miner 0 runs with a hold directory (:data:`~hypertrain.miner.main.TEST_HOLD_ENV`):
at each chosen phase boundary it stops, the test SIGKILLs the daemon and lets the miner go on at
once, so its next step runs into the outage (checked: it has not passed the next phase when the
new daemon starts), and starts a new daemon on the same state dir and port :data:`OUTAGE`
seconds later. One outage in each phase that talks to the daemon:

- ``assigned``: the start state and Accept;
- ``step`` (the first inner step): training, which needs no daemon, then Commit;
- ``trained``: Commit;
- ``committed``: the leaves;
- ``leaves``: the upload grant and PUT;
- ``uploaded``: the DeltaManifest;
- ``manifest_posted``: the next round's view polls.

Miner 1 runs free and meets the same outages wherever it is. Afterwards: each miner went
through every round in one process; a round either miner did not upload had a deadline
swallowed by an outage (none, unless a start-up took many seconds on a loaded machine: the
last line printed says); every uploaded delta is stored with its committed hash and merged in
its round's tape, and no other.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Final

import pytest
import trio

from tests.e2e.crashnet import (
    FAST_RETRY,
    CrashNetwork,
    MinerSlot,
    Settings,
    open_crash_network,
    rounds_lost,
    unexplained_losses,
)

OUTAGE: Final = 3.0
"""Seconds from a daemon's SIGKILL to the start of the next one (which then takes its start-up
to listen)."""
ROUNDS: Final = 4
SETTINGS: Final = Settings(
    total_rounds=ROUNDS, assign_after_open=1, train_rounds=14, upload_after_commit=4
)
ROUND_SECONDS: Final = 1 + 14 + 4
HOLDS: Final = (
    (0, "assigned"),
    (0, "committed"),
    (1, "trained"),
    (1, "uploaded"),
    (2, "leaves"),
    (2, "manifest_posted"),
    (3, "step"),
)
"""``(round, hook point)`` of each outage: at most one before and one after each Commit."""
BLOCKED: Final = {
    "assigned": "accepted",
    "step": "committed",
    "trained": "committed",
    "committed": "leaves",
    "uploaded": "manifest_posted",
    "leaves": "uploaded",
}
"""The phase line each hold point's next daemon call leads to: the outage must hold it back
(after ``manifest_posted``, the next round's view polls fail instead: ``poll-error``)."""
HOLD_WAIT: Final = ROUND_SECONDS * 2 + 30.0
"""Bound on the wait for a hold (the round it is in may not have opened yet)."""
TEST_SECONDS: Final = ROUND_SECONDS * (ROUNDS + 1) + 120.0
"""Hard bound on the whole test (about 90 s on 2 cores)."""


def _felt(slot: MinerSlot, w: int, point: str) -> bool:
    """Whether miner ``slot`` is being held back by the outage at ``point`` of round ``w``:
    the phase after it is not reached (or, after ``manifest_posted``, a poll failed)."""
    lines = slot.child.stderr.read_text(errors="replace").splitlines()
    if point == "manifest_posted":
        return any(s.startswith(f"hypertrain-miner: round {w + 1}: poll-error") for s in lines)
    after = f"hypertrain-miner: round {w}: {BLOCKED[point]}"
    return not any(s == after or s.startswith(f"{after} ") for s in lines)


async def _outage_at(net: CrashNetwork, slot: MinerSlot, w: int, point: str) -> None:
    """With miner 0 held at ``point`` of round ``w`` (its hold file placed at the start):
    SIGKILL the daemon, let the miner go on into the outage, start a daemon :data:`OUTAGE` s
    later."""
    line = f"hypertrain-miner: round {w}: test-hold at {point}"
    await slot.child.wait_for_line(lambda s: s == line, HOLD_WAIT, stream="stderr")
    await net.kill_daemon()
    (slot.holds / f"{w}.{point}").unlink()  # the miner's next step runs into the outage
    await trio.sleep(OUTAGE)
    assert _felt(slot, w, point), f"miner 0 did not meet the outage at {point} of round {w}"
    await net.start_daemon()


async def _object(net: CrashNetwork, key: str) -> bytes:
    """The bytes the daemon serves as object ``key``."""
    headers = {"Authorization": f"Bearer {net.ws.admin_token}"}
    r = await net.get(f"/v1/objects/{key}", headers=headers)
    assert r is not None, f"no daemon answered GET /v1/objects/{key}"
    assert r.status_code == 200, (key, r.status_code, r.text[:300])
    return r.content


async def _merged(net: CrashNetwork, w: int) -> dict[str, Any]:
    """Round ``w``'s view once it is merged (the last one is merged at its ``d_upload``)."""
    with trio.fail_after(ROUND_SECONDS + 30.0):
        while True:
            view: dict[str, Any] = await net.get_json(f"/v1/runs/{net.run_id}/rounds/{w}?full=1")
            if view["tape_key"] is not None:
                return view
            await trio.sleep(0.5)


@pytest.mark.slow
async def test_miners_ride_out_a_daemon_outage_in_each_phase(tmp_path: Path) -> None:
    started = time.monotonic()
    holds = tuple(f"{w}.{point}" for w, point in HOLDS)
    with trio.fail_after(TEST_SECONDS):
        async with open_crash_network(tmp_path, SETTINGS, holds=holds, miner_env=FAST_RETRY) as net:
            for w, point in HOLDS:
                await _outage_at(net, net.miners[0], w, point)
            for slot in net.miners:
                await slot.child.wait(ROUND_SECONDS * 2 + 30.0)
            views = [await _merged(net, w) for w in range(ROUNDS)]
            tapes = [json.loads(await _object(net, v["tape_key"])) for v in views]
            committed: dict[tuple[int, str], str] = {}
            stored: dict[tuple[int, str], str] = {}
            for w, view in enumerate(views):
                for m in view["miners"]:
                    if m["commit"] is not None:
                        key = m["commit"]["body"]["delta_hash"]
                        committed[w, m["hotkey"]] = key
                        stored[w, m["hotkey"]] = hashlib.sha256(await _object(net, key)).hexdigest()
            assert await net.stop_daemon() == 0, net.current_daemon().tail()
    # Each miner went through every round in one process, and says which it could not upload.
    lost = rounds_lost(net)
    # Only an outage that swallowed one of its deadlines cost a round.
    assert unexplained_losses(views, lost, net.outages) == [], (lost, net.outages)
    for w, view in enumerate(views):
        # Nothing uploaded was lost: every uploaded delta is stored and merged.
        uploaded = {h for h, ws in lost.items() if w not in ws}
        assert {m["hotkey"] for m in view["miners"] if m["status"] == "UPLOADED"} == uploaded
        inputs = {i["id"]: i["object"] for i in tapes[w]["body"]["inputs"]}
        assert inputs == {h: committed[w, h] for h in uploaded}, (w, tapes[w]["body"])
    assert stored == committed
    outages = ", ".join(
        f"{point}@{w} D{o.killed}-{o.listening}"
        for (w, point), o in zip(HOLDS, net.outages, strict=True)
    )
    print(
        f"outage test: {len(net.outages)} outages of {OUTAGE:g} s and a restart ({outages});"
        f" {ROUNDS} rounds x {len(lost)} miners, rounds lost"
        f" {sum(len(ws) for ws in lost.values())} {lost}; {time.monotonic() - started:.1f} s"
    )
