"""``POST /v1/admin/beacon`` and ``GET /v1/beacon/latest``, through ``ingest_beacon``."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from hypertrain.beacon import BeaconRound, LocalChain, ingest, latest_round
from hypertrain.beacon.ingest import store_round
from hypertrain.coordinator.context import CoordinatorSink
from hypertrain.protocol.converter import unstructure
from tests.coordinator.harness import GENESIS, PERIOD_MS, Harness, open_harness


def _impostor_round(h: Harness, number: int) -> BeaconRound:
    """Round ``number`` as signed by another key: well-formed, but not this chain's."""
    impostor = LocalChain.from_seed(
        bytes(range(1, 33)), clock=h.wall, period_ms=PERIOD_MS, genesis_ms=int(GENESIS * 1000)
    )
    return impostor.round(number)


async def test_valid_round_is_stored_and_answered_with_round_and_latest(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_harness(tmp_path) as h:
        assert (await h.client.get("/v1/beacon/latest")).json() == {"round": 0}
        await trio.sleep(30)  # round 11 is due
        response = await h.post_round(h.round(10))
        assert (response.status_code, response.json()) == (200, {"round": 10, "latest": 10})
        older = await h.post_round(h.round(4))
        assert (older.status_code, older.json()) == (200, {"round": 4, "latest": 10})
        again = await h.post_round(h.round(10))
        assert (again.status_code, again.json()) == (200, {"round": 10, "latest": 10})
        latest = await h.client.get("/v1/beacon/latest")
        assert latest.json() == unstructure(h.round(10))
        assert h.ctx.beacon.latest == 10
        assert await h.ctx.db.read(latest_round) == 10


async def test_invalid_rounds_are_400_and_store_nothing(tmp_path: Path) -> None:
    async with open_harness(tmp_path) as h:
        good = unstructure(h.round(1))
        bad_bodies: list[dict[str, object]] = [
            {**good, "signature": "zz"},
            {**good, "round": 0},
            {"round": 1},
            unstructure(_impostor_round(h, 1)),  # well-formed; only BLS can tell
        ]
        for body in bad_bodies:
            response = await h.post_round(body)
            assert response.status_code == 400, body
            assert response.json()["detail"]
        not_json = await h.client.post(
            "/v1/admin/beacon", content=b"[1,", headers={"Authorization": "Bearer admin-token.1"}
        )
        assert not_json.status_code == 400
        assert await h.ctx.db.read(latest_round) == 0


async def test_conflicting_signature_for_a_stored_round_is_409(tmp_path: Path) -> None:
    async with open_harness(tmp_path) as h:
        # A row that somehow holds another signature (e.g. stored by a buggy older version).
        await h.ctx.db.write(store_round, _impostor_round(h, 1), 0)
        response = await h.post_round(h.round(1))
        assert response.status_code == 409
        assert "already stored with another signature" in response.json()["detail"]


async def test_posting_needs_the_admin_token(tmp_path: Path) -> None:
    async with open_harness(tmp_path) as h:
        assert (await h.post_round(h.round(1), token="nope")).status_code == 401
        assert await h.ctx.db.read(latest_round) == 0


async def test_observers_run_in_order_for_each_new_latest_round_only(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_harness(tmp_path) as h:
        calls: list[tuple[str, int, int]] = []

        async def first(d: int) -> None:
            calls.append(("first", d, h.ctx.beacon.latest))

        async def broken(d: int) -> None:
            raise RuntimeError("observer bug")

        async def last(d: int) -> None:
            await trio.sleep(1)
            calls.append(("last", d, h.ctx.beacon.latest))

        h.ctx.beacon_observers.extend([first, broken, last])
        await trio.sleep(30)
        for number in (2, 5, 3, 5, 6):
            assert (await h.post_round(h.round(number))).status_code == 200
        assert calls == [
            ("first", 2, 2),
            ("last", 2, 2),
            ("first", 5, 5),
            ("last", 5, 5),
            ("first", 6, 6),
            ("last", 6, 6),
        ]


async def test_new_rounds_are_published_as_beacon_events(tmp_path: Path) -> None:
    async with open_harness(tmp_path) as h, h.ctx.events.subscribe() as events:
        await h.post_round(h.round(1))
        await h.post_round(h.round(1))  # a repeat is not news
        await h.post_round(h.round(2))
        assert h.ctx.events.statistics().published == 2
        first = await events.receive()
        second = await events.receive()
        assert first is not None
        assert second is not None
        assert (first.kind, first.json) == ("beacon", '{"round":1,"latest":1}')
        assert (second.seq, second.json) == (2, '{"round":2,"latest":2}')


async def test_the_daemon_sink_uses_the_same_path(tmp_path: Path) -> None:
    async with open_harness(tmp_path) as h:
        seen: list[int] = []

        async def observer(d: int) -> None:
            seen.append(d)

        h.ctx.beacon_observers.append(observer)
        sink = CoordinatorSink(h.ctx)
        assert await sink.known() == 0
        assert await sink.push(h.round(1)) == 1
        assert await sink.known() == 1
        assert seen == [1]
        assert h.ctx.beacon.latest == 1


async def test_a_repeat_of_a_stored_round_skips_verification(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_harness(tmp_path) as h:
        assert (await h.post_round(h.round(1))).status_code == 200

        def refuse(*_args: object) -> None:
            raise AssertionError("verified again")

        monkeypatch.setattr(ingest, "check_round", refuse)
        again = await h.post_round(h.round(1))
        assert (again.status_code, again.json()) == (200, {"round": 1, "latest": 1})
        # Anything that is not an exact repeat still goes the whole way.
        other = {**unstructure(h.round(1)), "signature": _impostor_round(h, 1).signature}
        with pytest.raises(AssertionError, match="verified again"):
            await h.ctx.ingest_beacon(BeaconRound.from_json(other))
