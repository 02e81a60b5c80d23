"""The local chain: schedule on the injected clock, persistence, key safety, its HTTP face."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import trio
import trio.testing

from hypertrain.beacon.bls import check_round, local_chain_hash, verify_round
from hypertrain.beacon.chain import SCHEME_UNCHAINED_G1, BeaconRound, ChainInfo
from hypertrain.beacon.local import LOCAL_BEACON_ID, LocalChain, LocalChainError, local_chain_app
from hypertrain.protocol.errors import KeyfileError, NotFound
from nurseries import FixedClock, VirtualClock
from nurseries.testing import open_mounted_client

EPOCH = 1_700_000_000.0


def open_chain(state: Path, clock: FixedClock, **kwargs: float) -> LocalChain:
    return LocalChain.open(state, clock=clock, **kwargs)


# --- schedule ----------------------------------------------------------------------------


async def test_round_r_is_due_exactly_at_genesis_plus_r_minus_1_periods(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    clock = VirtualClock(epoch=EPOCH)
    chain = LocalChain.open(tmp_path, clock=clock, period=3.0, genesis=EPOCH + 10)
    assert chain.latest() is None
    with pytest.raises(NotFound, match="not due until"):
        chain.round(1)
    await trio.sleep_until(10 - 0.001)
    assert chain.latest() is None
    await trio.sleep_until(10)
    check_round(chain.info, chain.round(1))
    assert chain.latest() == chain.round(1)
    with pytest.raises(NotFound, match="round 2 is not due"):
        chain.round(2)
    await trio.sleep_until(10 + 4 * 3 - 0.001)
    assert chain.latest_round_number() == 4
    await trio.sleep_until(10 + 4 * 3)
    latest = chain.latest()
    assert latest is not None
    assert latest.round == 5
    check_round(chain.info, latest)
    with pytest.raises(NotFound):
        chain.round(6)
    with pytest.raises(NotFound, match="start at 1"):
        chain.round(0)


async def test_sub_second_period_works(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    clock = VirtualClock(epoch=EPOCH)
    chain = LocalChain.open(tmp_path, clock=clock, period=0.25)
    assert chain.info.period_ms == 250
    assert chain.info.genesis_ms == round(EPOCH * 1000)
    assert chain.latest_round_number() == 1
    await trio.sleep(10.0)
    assert chain.latest_round_number() == 41
    for r in (1, 2, 40, 41):
        check_round(chain.info, chain.round(r))
    with pytest.raises(NotFound):
        chain.round(42)


def test_genesis_defaults_to_now_floored_to_the_second(tmp_path: Path) -> None:
    chain = open_chain(tmp_path, FixedClock(EPOCH + 0.9876))
    assert chain.info.genesis_ms == 1_700_000_000_000
    assert chain.info.period_ms == 3000


def test_info_is_a_local_unchained_g1_chain_named_by_its_hash(tmp_path: Path) -> None:
    chain = open_chain(tmp_path, FixedClock(EPOCH), period=0.5)
    info = chain.info
    assert info.scheme_id == SCHEME_UNCHAINED_G1
    assert info.beacon_id == LOCAL_BEACON_ID
    assert info.hash == local_chain_hash(
        period_ms=500,
        genesis_ms=info.genesis_ms,
        public_key=bytes.fromhex(info.public_key),
        scheme_id=SCHEME_UNCHAINED_G1,
        beacon_id=LOCAL_BEACON_ID,
    )
    assert ChainInfo.from_json(json.loads(json.dumps(info.to_json()))) == info


def test_rounds_are_cached_in_a_bounded_lru() -> None:
    clock = FixedClock(EPOCH + 100)
    chain = LocalChain.from_seed(b"\x05" * 32, clock=clock, period_ms=1000, genesis_ms=0)
    small = LocalChain(chain._signer, chain.info, clock, cache_size=2)
    first = small.round(1)
    assert small.round(1) is first
    small.round(2)
    small.round(3)
    assert list(small._cache) == [2, 3]
    assert small.round(1) == first  # signed again, same bytes


# --- persistence and key safety ----------------------------------------------------------


def test_reopening_gives_the_same_chain_and_rounds(tmp_path: Path) -> None:
    clock = FixedClock(EPOCH)
    first = open_chain(tmp_path, clock, period=2.0)
    clock.advance(60)
    rounds = [first.round(r) for r in (1, 7, 31)]
    clock.advance(1000)
    again = open_chain(tmp_path, clock)  # period and genesis as stored
    assert again.info == first.info
    assert [again.round(r) for r in (1, 7, 31)] == rounds
    assert open_chain(tmp_path, clock, period=2.0, genesis=EPOCH).info == first.info
    other = open_chain(tmp_path / "other", clock, period=2.0, genesis=EPOCH)
    assert other.info.hash != first.info.hash
    assert not any(verify_round(first.info, other.round(r)) for r in (1, 7))


def test_the_key_file_is_0600_and_the_parameters_are_stored(tmp_path: Path) -> None:
    chain = open_chain(tmp_path, FixedClock(EPOCH), period=0.25)
    key = tmp_path / "beacon" / "local-beacon.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "beacon").stat().st_mode) & 0o077 == 0
    assert len(bytes.fromhex(key.read_text().strip())) == 32
    params = json.loads((tmp_path / "beacon" / "local-chain.json").read_text())
    assert params == {
        "v": 1,
        "period_ms": 250,
        "genesis_ms": chain.info.genesis_ms,
        "public_key": chain.info.public_key,
        "hash": chain.info.hash,
    }


def test_an_unsafe_key_file_is_refused(tmp_path: Path) -> None:
    open_chain(tmp_path, FixedClock(EPOCH))
    key = tmp_path / "beacon" / "local-beacon.key"
    os.chmod(key, 0o644)
    with pytest.raises(KeyfileError, match="chmod 600"):
        open_chain(tmp_path, FixedClock(EPOCH))


def test_a_replaced_key_is_refused(tmp_path: Path) -> None:
    open_chain(tmp_path, FixedClock(EPOCH))
    key = tmp_path / "beacon" / "local-beacon.key"
    key.unlink()
    key.write_text("11" * 32)
    key.chmod(0o600)
    with pytest.raises(LocalChainError, match="does not hold the key"):
        open_chain(tmp_path, FixedClock(EPOCH))


def test_a_period_or_genesis_mismatch_is_refused(tmp_path: Path) -> None:
    open_chain(tmp_path, FixedClock(EPOCH), period=3.0)
    with pytest.raises(LocalChainError, match=r"has period 3\.0 s, not 0\.25 s"):
        open_chain(tmp_path, FixedClock(EPOCH), period=0.25)
    with pytest.raises(LocalChainError, match="has genesis"):
        open_chain(tmp_path, FixedClock(EPOCH), genesis=EPOCH + 1)


@pytest.mark.parametrize(
    "content", ["{", "[]", '{"v": 2}', '{"v": 1, "period_ms": "3", "genesis_ms": 0}']
)
def test_corrupt_parameters_are_refused(tmp_path: Path, content: str) -> None:
    open_chain(tmp_path, FixedClock(EPOCH))
    (tmp_path / "beacon" / "local-chain.json").write_text(content)
    with pytest.raises(LocalChainError, match=r"local-chain\.json"):
        open_chain(tmp_path, FixedClock(EPOCH))


@pytest.mark.parametrize("period", [0.0, -1.0, 0.0001, float("nan"), float("inf")])
def test_bad_periods_are_refused(tmp_path: Path, period: float) -> None:
    with pytest.raises(LocalChainError, match="period"):
        open_chain(tmp_path, FixedClock(EPOCH), period=period)


# --- HTTP --------------------------------------------------------------------------------

BASE = "http://beacon"


async def test_the_app_serves_drands_http_shape(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    clock = VirtualClock(epoch=EPOCH)
    chain = LocalChain.open(tmp_path, clock=clock, period=0.5, genesis=EPOCH + 1)
    h = chain.info.hash
    async with open_mounted_client({BASE: local_chain_app(chain)}, timeout=10.0) as client:
        info = await client.get(f"{BASE}/{h}/info")
        assert info.status_code == 200
        assert info.headers["content-type"] == "application/json"
        served = ChainInfo.from_json(info.json())
        assert served == chain.info
        assert (await client.get(f"{BASE}/info")).json() == info.json()
        assert (await client.get(f"{BASE}/chains")).json() == [h]

        early = await client.get(f"{BASE}/{h}/public/latest")
        assert early.status_code == 404
        assert "no round yet" in early.json()["detail"]

        await trio.sleep(1 + 0.5 * 9)  # round 10 is due now
        latest = await client.get(f"{BASE}/{h}/public/latest")
        assert latest.status_code == 200
        rnd = BeaconRound.from_json(latest.json())
        assert rnd.round == 10
        check_round(served, rnd)
        for path in (f"/{h}/public/3", "/public/3", f"/{h}/public/10"):
            answer = await client.get(BASE + path)
            assert answer.status_code == 200, path
            check_round(served, BeaconRound.from_json(answer.json()))
        assert (await client.get(f"{BASE}/public/latest")).json() == latest.json()


async def test_the_app_refuses_what_it_cannot_serve(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    clock = VirtualClock(epoch=EPOCH)
    chain = LocalChain.open(tmp_path, clock=clock, period=1.0)
    h = chain.info.hash
    async with open_mounted_client({BASE: local_chain_app(chain)}, timeout=10.0) as client:
        cases = {
            f"/{'ab' * 32}/info": "unknown chain",
            f"/{'ab' * 32}/public/1": "unknown chain",
            f"/{h}/public/2": "not due",
            f"/{h}/public/0": "start at 1",
            f"/{h}/public/-1": "bad round",
            f"/{h}/public/1x": "bad round",
            f"/{h}/public/{'9' * 30}": "bad round",
            f"/{h}/nope": "not found",
            "/": "not found",
        }
        for path, detail in cases.items():
            answer = await client.get(BASE + path)
            assert answer.status_code == 404, path
            assert detail in answer.json()["detail"], path
        posted = await client.post(f"{BASE}/{h}/public/latest")
        assert posted.status_code == 405
        assert posted.headers["allow"] == "GET"
        await trio.sleep(1.0)
        assert (await client.get(f"{BASE}/{h}/public/2")).status_code == 200
