"""The relay client: agreement, min_relays, straddles, retries with exact backoff, chain pinning."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from hypertrain.beacon.chain import BeaconRound
from hypertrain.beacon.errors import BeaconDisagreement, BeaconUnavailable, ChainMismatch
from hypertrain.beacon.local import LocalChain, local_chain_app
from hypertrain.beacon.relays import USER_AGENT, RelayClient
from hypertrain.protocol.converter import unstructure
from nurseries import FixedClock, VirtualClock
from nurseries.testing import open_mounted_client
from tests.beacon.relay_fakes import GENESIS, IMPOSTOR_SEED, make_chain, tampering_app

A, B, C = "http://relay-a", "http://relay-b", "http://relay-c"
CHAIN = make_chain(FixedClock(GENESIS + 3 * 199))  # rounds up to 200 can be signed
INFO = CHAIN.info
Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


@attrs.define
class Relays:
    """Fake relays behind one MockTransport: per host, a handler; every request logged."""

    handlers: dict[str, Handler]
    log: list[tuple[str, str, float]] = attrs.Factory(list)

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        host = f"{request.url.scheme}://{request.url.host}"
        self.log.append((host, request.url.path, trio.current_time()))
        assert request.headers["user-agent"] == USER_AGENT
        return await self.handlers[host](request)

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self))


def serving(chain: LocalChain = CHAIN, *, latest: int = 100) -> Handler:
    """A well-behaved relay of ``chain`` whose latest round is ``latest``."""

    async def handle(request: httpx.Request) -> httpx.Response:
        _, chain_hash, *rest = request.url.path.split("/")
        assert chain_hash == chain.info.hash
        if rest == ["info"]:
            return httpx.Response(200, json=chain.info.to_json())
        which = rest[1]
        number = latest if which == "latest" else int(which)
        if number > latest:
            return httpx.Response(404, json={"detail": "not yet"})
        return httpx.Response(200, json=unstructure(chain.round(number)))

    return handle


def status_then(
    statuses: list[int], then: Handler, headers: dict[str, str] | None = None
) -> Handler:
    """Answer with each of ``statuses`` once, then behave as ``then``."""
    pending = list(statuses)

    async def handle(request: httpx.Request) -> httpx.Response:
        if pending:
            return httpx.Response(pending.pop(0), json={"detail": "busy"}, headers=headers)
        return await then(request)

    return handle


def answering(body: object) -> Handler:
    async def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=body)

    return handle


def client_for(relays: Relays, urls: tuple[str, ...] = (A, B), **kwargs: Any) -> RelayClient:
    return RelayClient(urls, INFO, client=relays.client(), **kwargs)


async def test_agreeing_relays_give_a_verified_round(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relays = Relays({A: serving(), B: serving()})
    client = client_for(relays)
    assert await client.latest() == CHAIN.round(100)
    assert await client.round(42) == CHAIN.round(42)
    assert await client.info() == INFO
    paths = sorted({path for _, path, _ in relays.log})
    assert paths == [f"/{INFO.hash}/info", f"/{INFO.hash}/public/42", f"/{INFO.hash}/public/latest"]
    assert len(relays.log) == 6


async def test_a_relay_serving_a_bad_signature_is_a_disagreement(
    autojump_clock: trio.testing.MockClock,
) -> None:
    impostor = make_chain(FixedClock(GENESIS + 3 * 99), seed=IMPOSTOR_SEED)
    relays = Relays({A: serving(), B: answering(unstructure(impostor.round(100)))})
    with pytest.raises(BeaconDisagreement, match=f"invalid answer: {B}: round 100: BLS") as e:
        await client_for(relays).latest()
    assert set(e.value.failures) == {B}
    relays = Relays({A: serving(), B: answering({"round": 100, "signature": "zz"})})
    with pytest.raises(BeaconDisagreement, match="signature"):
        await client_for(relays).round(100)


async def test_relays_with_different_answers_disagree(
    autojump_clock: trio.testing.MockClock,
) -> None:
    other = BeaconRound(round=100, signature="0" * 96, randomness="1" * 64)
    relays = Relays({A: serving(), B: answering(unstructure(other))})
    client = client_for(relays, check=lambda info, rnd: None)  # a chain without BLS, say
    with pytest.raises(BeaconDisagreement, match="relays disagree"):
        await client.round(100)


async def test_a_relay_answering_another_round_than_asked_is_a_disagreement(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relays = Relays({A: serving(), B: answering(unstructure(CHAIN.round(99)))})
    with pytest.raises(BeaconDisagreement, match="asked for round 100, got round 99"):
        await client_for(relays).round(100)


async def test_one_relay_down_is_fine_while_min_relays_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relays = Relays({A: serving(), B: serving(), C: status_then([503] * 10, serving())})
    client = client_for(relays, (A, B, C), min_relays=2)
    assert await client.latest() == CHAIN.round(100)
    assert [t for host, _, t in relays.log if host == C] == [0.0, 0.5, 1.5]  # 3 attempts


async def test_too_few_answers_is_unavailable_naming_each_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relays = Relays({A: serving(), B: status_then([503] * 10, serving())})
    with pytest.raises(BeaconUnavailable) as e:
        await client_for(relays).latest()
    assert not isinstance(e.value, BeaconDisagreement)
    assert str(e.value) == (
        f"latest: 1 of 2 relays answered, 2 needed ({B}: HTTP 503 (after 3 attempts))"
    )
    assert e.value.failures == {B: "HTTP 503 (after 3 attempts)"}


async def test_429_is_retried_with_exact_backoff(autojump_clock: trio.testing.MockClock) -> None:
    relays = Relays({A: serving(), B: status_then([429, 429], serving())})
    client = client_for(relays, backoff=0.5, backoff_max=4.0)
    assert await client.latest() == CHAIN.round(100)
    assert [t for host, _, t in relays.log if host == B] == [0.0, 0.5, 1.5]
    assert trio.current_time() == 1.5


async def test_retry_after_is_honoured_up_to_the_cap(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relays = Relays(
        {A: serving(), B: status_then([429, 503], serving(), headers={"retry-after": "3"})}
    )
    client = client_for(relays, backoff=0.5, backoff_max=2.5)
    await client.latest()
    assert [t for host, _, t in relays.log if host == B] == [0.0, 2.5, 5.0]


async def test_network_errors_and_408_are_retried_other_4xx_are_final(
    autojump_clock: trio.testing.MockClock,
) -> None:
    answers_408 = status_then([408], serving())
    times: list[float] = []

    async def flaky(request: httpx.Request) -> httpx.Response:
        times.append(trio.current_time())
        if len(times) == 1:
            raise httpx.ConnectError("connection refused", request=request)
        return await answers_408(request)

    relays = Relays({A: serving(), B: flaky})
    assert await client_for(relays).round(7) == CHAIN.round(7)
    assert times == [0.0, 0.5, 1.5]  # connect error, 408, answer
    relays = Relays({A: serving(), B: status_then([403], serving())})
    with pytest.raises(BeaconUnavailable, match=f"{B}: HTTP 403\\)"):
        await client_for(relays).round(7)
    assert [host for host, _, _ in relays.log].count(B) == 1


async def test_relays_straddling_a_boundary_are_asked_again_for_the_lowest_round(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relays = Relays({A: serving(latest=100), B: serving(latest=101)})
    assert await client_for(relays).latest() == CHAIN.round(100)
    asked = sorted((host, path.rsplit("/", 1)[1]) for host, path, _ in relays.log)
    assert asked == [(A, "100"), (A, "latest"), (B, "100"), (B, "latest")]


async def test_a_relay_lagging_far_behind_is_a_disagreement(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relays = Relays({A: serving(latest=95), B: serving(latest=100)})
    with pytest.raises(BeaconDisagreement, match="5 rounds apart"):
        await client_for(relays, max_straddle=2).latest()


async def test_info_must_be_the_pinned_chain(autojump_clock: trio.testing.MockClock) -> None:
    other = attrs.evolve(INFO, public_key="ab" * 96, period_ms=1000)
    relays = Relays({A: serving(), B: answering(other.to_json())})
    with pytest.raises(ChainMismatch, match=f"{B}: serves another chain .*public_key, period_ms"):
        await client_for(relays).info()
    relays = Relays({A: serving(), B: answering({"public_key": 5})})
    with pytest.raises(ChainMismatch, match=r"invalid answer: .*chain info"):
        await client_for(relays).info()


async def test_a_hanging_relay_is_cut_at_the_query_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def hang(request: httpx.Request) -> httpx.Response:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    relays = Relays({A: serving(), B: hang})
    with pytest.raises(BeaconUnavailable, match=f"{B}: no answer within 7 s"):
        await client_for(relays, query_timeout=7.0).latest()
    assert trio.current_time() == 7.0
    relays = Relays({A: serving(), B: hang, C: serving()})
    assert await client_for(relays, (A, B, C), query_timeout=7.0).round(3) == CHAIN.round(3)


def test_settings_are_validated() -> None:
    client = httpx.AsyncClient()
    with pytest.raises(ValueError, match="distinct"):
        RelayClient([A, A + "/"], INFO, client=client)
    with pytest.raises(ValueError, match="need at least 2 relays, got 1"):
        RelayClient([A], INFO, client=client)
    with pytest.raises(ValueError, match="http"):
        RelayClient(["ftp://x", A], INFO, client=client)
    assert RelayClient([A + "/", B], INFO, client=client, min_relays=1).relays == (A, B)


async def test_two_local_chain_relays_in_process(autojump_clock: trio.testing.MockClock) -> None:
    chain = make_chain(VirtualClock(epoch=GENESIS))
    impostor = make_chain(VirtualClock(epoch=GENESIS), seed=IMPOSTOR_SEED)
    apps = {
        "http://one": local_chain_app(chain),
        "http://two": local_chain_app(chain),
        "http://bad": tampering_app(local_chain_app(chain), impostor),
    }
    async with open_mounted_client(apps) as client:
        relays = RelayClient(["http://one", "http://two"], chain.info, client=client)
        await trio.sleep(30.0)  # round 11 is due at genesis + 30
        assert await relays.info() == chain.info
        assert await relays.latest() == chain.round(11)
        assert await relays.round(3) == chain.round(3)
        with pytest.raises(BeaconUnavailable, match="HTTP 404"):
            await relays.round(12)
        bad = RelayClient(["http://one", "http://bad"], chain.info, client=client)
        assert await bad.info() == chain.info
        with pytest.raises(BeaconDisagreement, match="http://bad: round 11: BLS"):
            await bad.latest()
