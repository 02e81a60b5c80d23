"""The pusher service in virtual time: two local-chain relays, a coordinator on the real ingest."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import httpx
import pytest
import trio
import trio.testing

from hypertrain.beacon.clock import BeaconClock
from hypertrain.beacon.errors import PusherGaveUp, SinkAuthError, SinkRefused, TokenFileError
from hypertrain.beacon.ingest import get_round, latest_round, store_round
from hypertrain.beacon.local import LocalChain, LocalChainSource, local_chain_app
from hypertrain.beacon.pusher import Pusher, TickRecord, rounds_to_push
from hypertrain.beacon.relays import RelayClient
from hypertrain.beacon.sinks import HttpSink, StoreSink, read_token
from hypertrain.protocol.converter import unstructure
from hypertrain.store import Database, open_database
from nurseries import ASGIApp, VirtualClock
from nurseries.testing import open_mounted_client
from tests.beacon.coordinator_app import CoordinatorApp
from tests.beacon.relay_fakes import GENESIS, IMPOSTOR_SEED, down_app, make_chain, tampering_app

TOKEN = "s3cret.admin-token_~1"
RELAYS = ("http://relay-a", "http://relay-b")
API = "http://coord"


@attrs.define
class Net:
    """Two relays of one local chain, a coordinator, and a client mounted on all of them."""

    wall: VirtualClock
    chain: LocalChain
    db: Database
    coordinator: CoordinatorApp
    client: httpx.AsyncClient
    token_file: Path
    records: list[TickRecord] = attrs.Factory(list)

    def pusher(
        self, relays: tuple[str, ...] = RELAYS, *, catch_up: int = 20, max_failures: int = 10
    ) -> Pusher:
        relay_client = RelayClient(relays, self.chain.info, client=self.client)
        sink = HttpSink(API, self.token_file, client=self.client)
        return Pusher(
            relay_client,
            sink,
            catch_up=catch_up,
            max_failures=max_failures,
            report=self.records.append,
        )

    def lines(self) -> list[dict[str, object]]:
        return [unstructure(record) for record in self.records]


@asynccontextmanager
async def open_net(tmp_path: Path, extra: dict[str, ASGIApp] | None = None) -> AsyncIterator[Net]:
    wall = VirtualClock(epoch=GENESIS)
    chain = make_chain(wall)
    token_file = tmp_path / "admin_token"
    token_file.write_text(f"  {TOKEN}\n")
    token_file.chmod(0o600)
    async with open_database(tmp_path / "coord.db", wall_clock=wall) as db:
        coordinator = CoordinatorApp(db, chain.info, TOKEN, wall)
        apps: dict[str, ASGIApp] = {relay: local_chain_app(chain) for relay in RELAYS}
        apps.update(extra or {})
        apps[API] = coordinator
        async with open_mounted_client(apps) as client:
            yield Net(wall, chain, db, coordinator, client, token_file)


def test_rounds_to_push_is_bounded_by_catch_up() -> None:
    assert list(rounds_to_push(known=0, latest=3, catch_up=20)) == [1, 2, 3]
    assert list(rounds_to_push(known=0, latest=50, catch_up=20)) == list(range(31, 51))
    assert list(rounds_to_push(known=45, latest=50, catch_up=20)) == [46, 47, 48, 49, 50]
    assert list(rounds_to_push(known=50, latest=50, catch_up=20)) == []
    assert list(rounds_to_push(known=60, latest=50, catch_up=20)) == []


def test_a_tick_record_says_which_round_the_sink_holds_after_it() -> None:
    assert TickRecord(pushed=(48, 49, 50), latest=50, known=47).held == 50
    assert TickRecord(pushed=(), latest=50, known=60).held == 60
    assert (
        TickRecord(pushed=(48,), latest=50, known=47, error="SinkUnavailable", failures=1).held
        == 48
    )
    assert TickRecord(pushed=(), latest=None, known=None, error="down", failures=2).held is None


async def test_each_tick_pushes_the_missing_rounds_oldest_first(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_net(tmp_path) as net:
        await trio.sleep(30.0)  # round 11 is due
        with trio.move_on_after(7.0):  # ticks at +0, +3, +6
            first = await net.client.get(f"{API}/v1/beacon/latest")
            assert first.json() == {"round": 0}
            async with trio.open_nursery() as nursery:
                assert await nursery.start(net.pusher().run) == 11  # D it starts from
        assert net.lines() == [
            {"pushed": list(range(1, 12)), "latest": 11, "known": 0},
            {"pushed": [12], "latest": 12, "known": 11},
            {"pushed": [13], "latest": 13, "known": 12},
        ]
        assert net.coordinator.pushes == list(range(1, 14))
        assert await net.db.read(get_round, 13) == net.chain.round(13)


async def test_catch_up_pushes_only_the_last_rounds(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_net(tmp_path) as net:
        await trio.sleep(3 * 49)  # round 50 is due, the coordinator has none
        record = await net.pusher().tick()
        assert unstructure(record) == {"pushed": list(range(31, 51)), "latest": 50, "known": 0}
        assert net.coordinator.pushes == list(range(31, 51))
        await trio.sleep(3 * 5)
        record = await net.pusher(catch_up=3).tick()
        assert record.pushed == (53, 54, 55)


async def test_relays_that_disagree_push_nothing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    impostor = make_chain(VirtualClock(epoch=GENESIS), seed=IMPOSTOR_SEED)
    same_chain = make_chain(VirtualClock(epoch=GENESIS))  # same seed and genesis as the net's
    bad = {"http://relay-bad": tampering_app(local_chain_app(same_chain), impostor)}
    async with open_net(tmp_path, bad) as net:
        await trio.sleep(9.0)
        record = await net.pusher(("http://relay-a", "http://relay-bad")).tick()
        assert record.pushed == ()
        assert record.latest is None
        assert record.failures == 1
        assert record.error is not None
        assert record.error.startswith("BeaconDisagreement: latest: relay served an invalid")
        assert "http://relay-bad: round 4: BLS signature does not verify" in record.error
        assert net.coordinator.pushes == []


async def test_one_relay_down_is_tolerated_while_min_relays_answer(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_net(tmp_path, {"http://relay-c": down_app(503)}) as net:
        await trio.sleep(9.0)
        record = await net.pusher((*RELAYS, "http://relay-c")).tick()
        assert unstructure(record) == {"pushed": [1, 2, 3, 4], "latest": 4, "known": 0}
        failing = await net.pusher(("http://relay-a", "http://relay-c")).tick()
        assert failing.error is not None
        assert "http://relay-c: HTTP 503 (after 3 attempts)" in failing.error


async def test_failures_in_a_row_give_up_and_a_good_tick_resets_them(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_net(tmp_path) as net:
        net.coordinator.fail_with = 503
        pusher = net.pusher(max_failures=3)
        assert (await pusher.tick()).failures == 1
        assert (await pusher.tick()).failures == 2
        net.coordinator.fail_with = None
        assert (await pusher.tick()).ok
        net.coordinator.fail_with = 502
        start = trio.current_time()
        with pytest.raises(PusherGaveUp, match="3 ticks failed in a row; last: SinkUnavailable"):
            await pusher.run()
        assert trio.current_time() - start == 6.0  # ticks at +0, +3, +6
        assert [line.get("failures") for line in net.lines()] == [1, 2, None, 1, 2, 3]
        assert pusher.statistics().failed_ticks == 5


async def test_a_conflicting_round_ends_the_pusher_with_409(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_net(tmp_path) as net:
        other = make_chain(VirtualClock(epoch=GENESIS), seed=IMPOSTOR_SEED)
        await trio.sleep(3.0)
        await net.db.write(store_round, other.round(2), 0)  # stored earlier, under another key
        net.coordinator.claim_latest = 1
        with pytest.raises(SinkRefused, match="HTTP 409: round 2 is already stored") as e:
            await net.pusher().tick()
        assert e.value.status == 409
        assert net.coordinator.pushes == [2]
        assert await net.db.read(get_round, 2) == other.round(2)  # never overwritten


async def test_wrong_token_is_an_auth_error_and_a_malformed_file_a_token_error(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_net(tmp_path) as net:
        net.token_file.write_text("wrong-token\n")
        with pytest.raises(SinkAuthError, match="HTTP 403: wrong admin token"):
            await net.pusher().tick()
        for bad in ("", "two tokens", "tok\x00en", "é"):
            net.token_file.write_text(bad)
            with pytest.raises(TokenFileError, match="exactly one"):
                await net.pusher().tick()
        net.token_file.unlink()
        with pytest.raises(TokenFileError, match="cannot read"):
            read_token(net.token_file)


async def test_store_sink_ingests_in_process_and_wakes_the_clock(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with (
        open_net(tmp_path) as net,
        open_database(tmp_path / "daemon.db", wall_clock=net.wall) as own,
    ):
        clock = BeaconClock(net.chain.info, net.wall)
        sink = StoreSink(own, net.chain.info, wall=net.wall, clock=clock)
        relays = RelayClient(RELAYS, net.chain.info, client=net.client)
        pusher = Pusher(relays, sink, report=net.records.append)
        woken: list[float] = []

        async def wait_for_round_5() -> None:
            with trio.fail_at(clock.deadline_of(5) + 1.0):
                await clock.wait_round(5)
            woken.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_round_5)
            nursery.start_soon(pusher.run)
            await trio.sleep(12.5)
            nursery.cancel_scope.cancel()
        assert woken == [12.0]  # the tick at 12 s pushed round 5 (due at 12 s)
        assert clock.latest == 5
        assert [r.pushed for r in net.records] == [(1,), (2,), (3,), (4,), (5,)]
        conflicting = make_chain(VirtualClock(epoch=GENESIS), seed=IMPOSTOR_SEED)
        await trio.sleep(3.0)
        await own.write(store_round, conflicting.round(6), 0)
        with pytest.raises(SinkRefused, match="round 6 is already stored") as e:
            await sink.push(net.chain.round(6))
        assert e.value.status == 409
        assert clock.latest == 5


async def test_request_stop_lets_the_tick_in_flight_finish(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_net(tmp_path, {"http://relay-c": down_app(503)}) as net:
        pusher = net.pusher((*RELAYS, "http://relay-c"))  # relay-c makes a tick take 1.5 s
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pusher.run)
            await trio.sleep(0.5)
            pusher.request_stop()
        assert trio.current_time() == 1.5
        assert net.lines() == [{"pushed": [1], "latest": 1, "known": 0}]
        idle = net.pusher()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(idle.run)
            await trio.sleep(1.0)  # between ticks
            idle.request_stop()
        assert trio.current_time() == 2.5


async def test_an_in_process_local_chain_feeds_the_store_through_the_same_pusher(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    wall = VirtualClock(epoch=GENESIS - 1.0)
    chain = make_chain(wall)
    async with open_database(tmp_path / "daemon.db", wall_clock=wall) as db:
        clock = BeaconClock(chain.info, wall)
        sink = StoreSink(db, chain.info, wall=wall, clock=clock)
        records: list[TickRecord] = []
        pusher = Pusher(LocalChainSource(chain), sink, catch_up=2, report=records.append)
        async with trio.open_nursery() as nursery:
            assert await nursery.start(pusher.run) is None  # the first tick learned no D
            await trio.sleep(9.5)
            nursery.cancel_scope.cancel()
        # The tick at t=0 is 1 s before genesis (a failed tick, retried); the ticks at 3, 6
        # and 9 s find rounds 1, 2 and 3 due (round r is due at genesis + (r-1) * 3 s).
        assert records[0].error is not None
        assert "genesis" in records[0].error
        assert [r.pushed for r in records[1:]] == [(1,), (2,), (3,)]
        assert clock.latest == 3
        assert await db.read(latest_round) == 3
        assert await db.read(get_round, 3) == chain.round(3)
