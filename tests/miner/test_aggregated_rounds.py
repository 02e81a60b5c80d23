"""Three real miners and the real daemon for five rounds: the aggregator service merges each
round at d_upload and opens the next (issue 7), in virtual time.

Checked: every round w + 1 opens at ``d_open = max(D, d_upload(w))`` (spec 4.1), theta hashes
chain (``RoundOpen(w+1).prev_final_hash == theta_hash == tape.theta_hash``; miners train from
the published start state, checking its TH), each stored tape replays bit for bit, the held-out
loss service (``holdout_dir`` = the build directory) evaluates theta(0) .. theta(5) and the loss
falls, and a daemon stopped between storing a step's objects and its write opens the next round
exactly once, from identical bytes, after a restart.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio
import trio.testing

from hypertrain.aggregator.merge import Params
from hypertrain.aggregator.tape import parse_signed_tape
from hypertrain.aggregator.tape_replay import replay_tape
from hypertrain.coordinator.flows.aggregation import AggregationRow, Step, get_aggregation
from hypertrain.coordinator.flows.heldout import LossRow, get_loss_row
from hypertrain.coordinator.services.aggregator import AggregatorService
from hypertrain.coordinator.tables.rounds import RoundRow, get_round_row, round_rows
from hypertrain.daemon.main import DaemonHandle
from hypertrain.daemon.services import SERVICES, DaemonParts, ServiceFn, ServiceSpec
from hypertrain.protocol.manifest import RunManifest
from hypertrain.trainer.state import unpack_state
from nurseries.testing import open_asgi_transport
from tests.daemon.support import running_daemon
from tests.miner.rounds_support import launch_with_dataset, mine_rounds
from tests.miner.test_against_the_daemon import (
    API,
    COORD,
    MINERS,
    _daemon,
    _launch,
    _settings,
)

ROUNDS = 5
RUN_TIMEOUT = 4000.0  # virtual seconds for five rounds


@asynccontextmanager
async def _daemon_with_holdout(
    tmp_path: Path, holdout_dir: Path, **coordinator: Any
) -> AsyncIterator[tuple[DaemonHandle, httpx.AsyncBaseTransport]]:
    """The daemon of ``_daemon`` with ``holdout_dir`` set (the held-out loss service runs)
    and the ``coordinator`` settings given."""
    settings = _settings(tmp_path)
    settings = attrs.evolve(
        settings,
        coordinator=attrs.evolve(settings.coordinator, holdout_dir=holdout_dir, **coordinator),
    )
    async with (
        running_daemon(settings) as handle,
        open_asgi_transport(handle.app, lifespan=False) as transport,
    ):
        yield handle, transport


async def _wait_aggregated(handle: DaemonHandle, run_id: str, w: int) -> AggregationRow:
    with trio.fail_after(RUN_TIMEOUT):
        while True:
            row = await handle.ctx.db.read(get_aggregation, run_id, w)
            if row is not None:
                return row
            await trio.sleep(1.0)


async def _wait_losses(handle: DaemonHandle, run_id: str, n: int) -> list[LossRow]:
    with trio.fail_after(RUN_TIMEOUT):
        while True:
            rows = [await handle.ctx.db.read(get_loss_row, run_id, w) for w in range(n)]
            if all(row is not None for row in rows):
                return [row for row in rows if row is not None]
            await trio.sleep(1.0)


def _replay(handle: DaemonHandle, params: Params, tape_key: str) -> str:
    objects = handle.ctx.objects
    signed = parse_signed_tape(objects.path_of(tape_key).read_bytes())
    report = replay_tape(
        signed,
        coord_ss58=COORD.ss58,
        load_object=lambda key: objects.path_of(key).read_bytes(),
        outer_params=params,
    )
    assert report.tape_key == tape_key
    return report.theta_hash


async def test_five_rounds_open_on_time_chain_their_thetas_replay_and_cut_the_heldout_loss(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        _daemon_with_holdout(tmp_path, data_dir) as (handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        # The operator pins the public part; the holdout stays in the build directory.
        objects_dir = tmp_path / "state" / "objects"
        run_id = await launch_with_dataset(client, run_manifest, data_dir, objects_dir, ROUNDS)
        with trio.fail_after(RUN_TIMEOUT):
            summaries = await mine_rounds(tmp_path, data_dir, transport, ROUNDS)
        aggs = [await _wait_aggregated(handle, run_id, w) for w in range(ROUNDS)]
        losses = await _wait_losses(handle, run_id, ROUNDS + 1)
        rounds: list[RoundRow] = await handle.ctx.db.read(round_rows, run_id)
        views = [(await client.get(f"/v1/runs/{run_id}/rounds/{w}")).json() for w in range(ROUNDS)]
        params = Params.from_outer(run_manifest.outer)
        replayed = [_replay(handle, params, agg.tape_key) for agg in aggs]
        tapes = [
            parse_signed_tape(handle.ctx.objects.path_of(agg.tape_key).read_bytes()) for agg in aggs
        ]
        start_states = [
            unpack_state(handle.ctx.objects.path_of(agg.theta_start_sha256).read_bytes())
            for agg in aggs
        ]
        metrics = (await client.get("/metrics")).text

    assert {hk: s.exit_code for hk, s in summaries.items()} == dict.fromkeys(
        (key.ss58 for key in MINERS), 0
    )
    assert [r.w for r in rounds] == list(range(ROUNDS))  # total_rounds: no round 5
    assert views[ROUNDS - 1]["state"] == "APPLIED"  # the last round, merged, opens nothing
    for w in range(ROUNDS - 1):
        prev, nxt = rounds[w], rounds[w + 1]
        assert nxt.deadlines.d_open == max(nxt.opened_round, prev.deadlines.d_upload)
        assert nxt.opened_round >= prev.deadlines.d_upload
        body = nxt.body
        assert body.prev_final_hash == body.theta_hash == aggs[w].theta_hash == replayed[w]
        assert views[w + 1]["state_sha256"] == aggs[w].theta_start_sha256
    for w in range(ROUNDS):
        assert start_states[w].theta_hash() == aggs[w].theta_hash
        assert {m["status"] for m in views[w]["miners"]} == {"UPLOADED"}
        assert views[w]["update_norm"] == aggs[w].update_norm
        assert views[w]["clipped"] == aggs[w].clipped
        assert views[w]["heldout_loss"] == losses[w].loss
        assert views[w]["heldout_loss_after"] == losses[w + 1].loss
        assert losses[w + 1].theta_hash == aggs[w].theta_hash
    assert losses[0].theta_hash == rounds[0].body.theta_hash  # the genesis
    assert {row.n_samples for row in losses} == {64}
    print("held-out loss of theta(0..5):", [round(row.loss, 4) for row in losses])
    assert losses[ROUNDS].loss < losses[0].loss
    # /metrics counted the daemon's merges (each timed) and shows the latest held-out loss.
    assert f"hypertrain_merges_total {ROUNDS}.0" in metrics
    assert f"hypertrain_merge_duration_seconds_count {ROUNDS}.0" in metrics
    assert f'hypertrain_heldout_loss{{run_id="{run_id}"}} {losses[ROUNDS].loss!r}' in metrics
    # Each tape starts from the previous round's stored OuterState.
    for w in range(1, ROUNDS):
        assert tapes[w].body.prev_state == aggs[w - 1].out_state
        assert tapes[w].body.prev_theta_hash == aggs[w - 1].theta_hash


class _Crash(Exception):
    pass


async def test_a_daemon_stopped_between_merge_and_open_opens_the_next_round_once(
    tmp_path: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    crashed: list[Step] = []
    stored = trio.Event()

    def crash(step: Step) -> None:
        crashed.append(step)
        stored.set()
        raise _Crash("injected between the objects and the write")

    def crashing(parts: DaemonParts) -> ServiceFn:
        return AggregatorService(parts.ctx, after_store=crash).run

    services = (
        *(spec for spec in SERVICES if spec.name != "aggregator"),
        ServiceSpec("aggregator", crashing),
    )
    async with (
        _daemon(tmp_path, services) as (handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        run_id = await _launch(client, run_manifest)
        round0 = await handle.ctx.db.read(get_round_row, run_id, 0)
        assert round0 is not None
        with trio.fail_after(RUN_TIMEOUT):
            await stored.wait()
        assert await handle.ctx.db.read(get_round_row, run_id, 1) is None
        assert await handle.ctx.db.read(get_aggregation, run_id, 0) is None
    first = crashed[0]

    async with _daemon(tmp_path) as (handle, _transport):
        agg = await _wait_aggregated(handle, run_id, 0)
        rounds = await handle.ctx.db.read(round_rows, run_id)
        tape = handle.ctx.objects.path_of(first.tape_key).read_bytes()
    assert [r.w for r in rounds] == [0, 1]
    assert agg.tape_key == first.tape_key
    assert agg.out_state == first.out_state
    assert agg.theta_start_sha256 == first.theta_start_sha256
    assert rounds[1].body.theta_hash == first.theta_hash
    assert parse_signed_tape(tape).body.w == 0
