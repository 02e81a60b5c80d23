"""The composition root in virtual time: ``serve_daemon`` with its own local beacon chain."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from hypertrain.beacon import latest_round
from hypertrain.daemon.main import DaemonHandle, serve_daemon
from hypertrain.daemon.settings import ConfigError, DaemonSettings
from nurseries import VirtualClock
from nurseries.testing import open_mounted_client
from tests.daemon.support import EPOCH, daemon_settings, running_daemon

PERIOD = 0.5


def _settings(tmp_path: Path, *, period: float | None = PERIOD) -> DaemonSettings:
    return daemon_settings(tmp_path, period=period)


async def test_local_beacon_pushes_one_round_every_period(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with running_daemon(_settings(tmp_path)) as handle:
        ctx = handle.ctx
        assert handle.url.startswith("http://127.0.0.1:")
        assert ctx.chain.period == PERIOD
        assert ctx.chain.genesis_time == EPOCH  # a new chain starts now
        assert ctx.beacon.latest == 1  # the first tick ran before the handle was reported
        # Each service reported where it starts.
        assert handle.services["beacon"] == 1  # the pusher: the round D it starts from
        assert handle.services["aggregator"] == 1
        assert "heldout" not in handle.services  # no holdout directory: does not apply
        seen: list[tuple[int, float]] = []

        async def observer(d: int) -> None:
            seen.append((d, trio.current_time()))

        ctx.beacon_observers.append(observer)
        await trio.sleep(10 * PERIOD + PERIOD / 2)
        assert ctx.beacon.latest == 11
        assert await ctx.db.read(latest_round) == 11
        assert seen == [(d, (d - 1) * PERIOD) for d in range(2, 12)]
        async with open_mounted_client({"http://d": handle.app}) as client:
            latest = (await client.get("http://d/v1/beacon/latest")).json()
        assert latest["round"] == 11


async def test_restart_keeps_the_beacon_state_and_the_local_chain(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    settings = _settings(tmp_path)
    async with running_daemon(settings) as first:
        await trio.sleep(4 * PERIOD + PERIOD / 2)
        chain_hash, d_before = first.ctx.chain.hash, first.ctx.beacon.latest
    assert d_before == 5
    await trio.sleep(10 * PERIOD)  # down for a while
    # Without services: the clock's D comes from the database alone.
    async with running_daemon(settings, services=()) as second:
        assert second.ctx.beacon.latest == d_before
        assert second.ctx.chain.hash == chain_hash
    # With the pusher, and the period left to the stored chain: it catches up to the due round.
    async with running_daemon(_settings(tmp_path, period=None)) as third:
        assert third.ctx.chain.hash == chain_hash
        assert third.ctx.beacon.latest == third.ctx.beacon.now_round()
        assert third.ctx.beacon.latest > d_before


async def test_another_period_for_an_existing_local_chain_is_a_config_error(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with running_daemon(_settings(tmp_path)):
        pass
    with pytest.raises(ConfigError, match=r"local beacon: .* has period 0.5 s, not 1.0 s"):
        await serve_daemon(_settings(tmp_path, period=PERIOD * 2), wall=VirtualClock(EPOCH))


async def test_shutdown_sets_stopping_first_and_ends_well_within_the_grace(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    settings = _settings(tmp_path)
    async with trio.open_nursery() as nursery:
        handle: DaemonHandle = await nursery.start(
            partial(serve_daemon, settings, wall=VirtualClock(EPOCH))
        )
        async with (
            open_mounted_client({"http://d": handle.app}) as client,
            handle.ctx.events.subscribe() as events,
        ):
            asked = trio.current_time()
            handle.request_shutdown()
            assert handle.ctx.stopping.is_set()
            assert await events.receive() is None  # the hub is closed: streams end
            refused = await client.get("http://d/v1/events")
            assert refused.status_code == 503
    assert trio.current_time() - asked < settings.grace
    assert not handle.supervisor.work_cancelled


async def test_a_damaged_ledger_journal_or_other_ledger_settings_refuse_to_start(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    settings = _settings(tmp_path)
    async with running_daemon(settings) as first:
        journal = first.ctx.ledger.ledger.path  # type: ignore[union-attr]
    # A second daemon on the same state dir while the first holds the journal: refused.
    async with running_daemon(settings):
        with pytest.raises(ConfigError, match=r"^ledger: .*lock"):
            await serve_daemon(settings, wall=VirtualClock(EPOCH))
    other = attrs.evolve(settings, coordinator=attrs.evolve(settings.coordinator, vest_rounds=3))
    with pytest.raises(ConfigError, match=r"^ledger: .*vest_rounds"):
        await serve_daemon(other, wall=VirtualClock(EPOCH))
    data = bytearray(journal.read_bytes())
    data[len(data) // 2] ^= 0x01  # inside the only record: not a torn tail
    journal.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=r"^ledger: .*offset 0"):
        await serve_daemon(settings, wall=VirtualClock(EPOCH))


async def test_a_shutdown_as_a_beacon_round_wakes_the_services_fails_none_of_them(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The shutdown is asked in the very step a round arrives, so every service waiting on the
    beacon is woken but has not yet run: each must still end by cancellation, and none may
    return or fail (the supervisor would log it and schedule a restart)."""
    caplog.set_level(logging.WARNING, logger="nurseries")
    async with running_daemon(_settings(tmp_path)) as handle:
        await handle.ctx.beacon.wait_round(handle.ctx.beacon.latest + 3)
        handle.request_shutdown()  # no checkpoint since the round woke everyone
    failures = [r.getMessage() for r in caplog.records if r.name.startswith("nurseries")]
    assert failures == []
