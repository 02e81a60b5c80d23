"""The scoring outbox: written by the DeltaManifest's transaction, drained by the scoring feed.

Checked: a recorded DeltaManifest leaves the miner row's ``delta_hash`` and one outbox row, a
refused one neither; the feed turns each row into its scoring step and forgets the row in the
same write, exactly once across a restart; a row waits while its run has no dataset; a delta of
a round far behind the newest is still fed; a row that cannot be fed does not hold back the ones
behind it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from hypertrain.coordinator.services.scorefeed import IDLE_WAIT, ScoreFeed
from hypertrain.coordinator.tables.miners import get_miner
from hypertrain.datasets import BuildOptions, DatasetManifest, SourceRoot, build
from hypertrain.datasets.manifest import MANIFEST_FILE, load_record
from hypertrain.datasets.pin import pin_async
from hypertrain.protocol.converter import structure
from hypertrain.protocol.envelope import NEVER, seal
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.messages import RoundOpen
from hypertrain.trainer.params import init_params
from hypertrain.trainer.state import pack_state
from tests.coordinator.harness import Harness
from tests.coordinator.lifecycle_support import COORD, admin, manifest, open_runs, push
from tests.coordinator.miner_support import DELTA, DELTA_SHA, KEYS, Flow, at_assign

TEXT = "".join(f"line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(200))
OLD = 17
"""Rounds opened after the uploaded one in the old-round test (the removed scan looked back 16)."""
HASHES = {
    name: bytes([i + 1]).hex() * 32
    for i, name in enumerate(("prev_final_hash", "theta_hash", "outer_state_hash", "center_hash"))
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("outbox-dataset")
    (root / "corpus.txt").write_text(TEXT, encoding="utf-8")
    out = root / "data"
    build(
        BuildOptions(
            sources=(SourceRoot(root / "corpus.txt", "corpus"),),
            out=out,
            seq_len=16,
            samples_per_shard=64,
            salt=b"s" * 32,
        )
    )
    return out


def outbox(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT * FROM scoring_outbox ORDER BY run_id, w, hotkey").fetchall()


def jobs(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    """``(subject, step, job_id, created_ms, inputs)`` of every job, by subject and step."""
    rows = conn.execute(
        "SELECT subject, step, job_id, created_ms, inputs FROM compute_jobs ORDER BY subject, step"
    ).fetchall()
    return [
        (json.loads(subject), step, job, created, {i["name"]: i["sha256"] for i in json.loads(ins)})
        for subject, step, job, created, ins in rows
    ]


def subject(flow: Flow, key: Keypair, w: int = 0) -> dict[str, Any]:
    return {"hotkey": key.ss58, "run_id": flow.run_id, "w": w}


async def scoring_flow(h: Harness, built: Path, *, dataset: bool = True) -> Flow:
    """Round 0 of a run over ``built`` at ``d_assign``; the dataset pinned and registered. The
    run names no auditor (scoring is the subject; an audited run would hold round w + 2 until
    round w's audits settle)."""
    record = load_record(DatasetManifest, built / MANIFEST_FILE)
    body = attrs.evolve(manifest(), dataset=record.dataset_spec(), auditors=())
    flow = await at_assign(h, body)
    if dataset:
        await register(flow, built)
    return flow


async def register(flow: Flow, built: Path) -> None:
    pinned = await pin_async(built, flow.h.ctx.settings.objects_dir)
    body = {"manifest_sha256": pinned.manifest_sha256}
    r = await admin(flow.h, "PUT", f"/v1/admin/runs/{flow.run_id}/dataset", body)
    assert r.status_code == 200, r.text


async def uploaded(flow: Flow, key: Keypair, data: bytes = DELTA) -> None:
    """``key`` accepted, committed to ``data`` and ``data`` stored; the manifest not posted."""
    await flow.accepted(key)
    digest = hashlib.sha256(data).hexdigest()
    r = await flow.post("commit", flow.commit(key, delta_hash=digest, delta_bytes=len(data)))
    assert r.status_code == 200, r.text
    url = (await flow.grant(key, digest)).json()["url"]
    assert (await flow.put(url, data)).status_code == 200


async def post_delta(flow: Flow, key: Keypair, data: bytes = DELTA) -> None:
    r = await flow.post("delta", flow.delta(key, data))
    assert r.status_code == 200, r.text


@asynccontextmanager
async def running_feed(h: Harness, batch: int | None = None) -> AsyncIterator[ScoreFeed]:
    """The scoring feed service over ``h.ctx`` (no holdout: public steps only)."""
    feed = ScoreFeed(h.ctx, None) if batch is None else ScoreFeed(h.ctx, None, batch=batch)
    async with trio.open_nursery() as nursery:
        await nursery.start(feed.run)
        yield feed
        nursery.cancel_scope.cancel()


async def a_pass() -> None:
    """Long enough for the feed's next pass, without a beacon round."""
    await trio.sleep(IDLE_WAIT + 1)


async def test_the_delta_transaction_writes_the_outbox_row_and_a_refused_one_nothing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h)
        await flow.accepted(KEYS[0])
        await flow.committed(KEYS[0])

        async def state() -> tuple[str | None, list[tuple[Any, ...]]]:
            row = await h.ctx.db.read(get_miner, flow.run_id, 0, KEYS[0].ss58)
            assert row is not None
            return row.delta_hash, await h.ctx.db.read(outbox)

        posted = flow.delta(KEYS[0])
        assert (await flow.post("delta", posted)).status_code == 409  # upload first
        assert (await flow.post("delta", flow.delta(KEYS[0], DELTA + b"x"))).status_code == 422
        assert await state() == (None, [])
        url = (await flow.grant(KEYS[0])).json()["url"]
        assert (await flow.put(url, DELTA)).status_code == 200
        assert (await flow.post("delta", posted)).status_code == 200
        queued = [(flow.run_id, 0, KEYS[0].ss58, DELTA_SHA, flow.d.d_assign)]
        assert await state() == (DELTA_SHA, queued)
        await flow.to(flow.d.d_assign + 1)
        assert (await flow.post("delta", posted)).status_code == 200  # idempotent
        other = flow.delta(KEYS[0], format="ht-sparse-v1")
        assert (await flow.post("delta", other)).status_code == 409  # a replay
        assert await state() == (DELTA_SHA, queued)
        # Refused at the upload deadline: still COMMITTED, nothing queued.
        await flow.accepted(KEYS[1])
        await flow.committed(KEYS[1])
        url = (await flow.grant(KEYS[1])).json()["url"]
        assert (await flow.put(url, DELTA)).status_code == 200
        await flow.to(flow.d.d_upload)
        assert (await flow.post("delta", flow.delta(KEYS[1]))).status_code == 409
        late = await h.ctx.db.read(get_miner, flow.run_id, 0, KEYS[1].ss58)
        assert late is not None
        assert (late.status, late.delta_hash) == ("COMMITTED", None)
        assert await h.ctx.db.read(outbox) == queued


async def test_the_feed_drains_each_row_exactly_once_across_a_restart(
    tmp_path: Path, built: Path, autojump_clock: trio.testing.MockClock
) -> None:
    data = tmp_path / "data"
    async with open_runs(tmp_path / "first", state_dir=data) as h:
        flow = await scoring_flow(h, built)
        await uploaded(flow, KEYS[0])
        await uploaded(flow, KEYS[1])
        async with running_feed(h):
            await post_delta(flow, KEYS[0])
            await a_pass()
            first = await h.ctx.db.read(jobs)
            assert await h.ctx.db.read(outbox) == []
        assert [(s, step) for s, step, *_ in first] == [(subject(flow, KEYS[0]), "public")]
        # Posted while the feed is down: it waits in the outbox.
        await post_delta(flow, KEYS[1])
        assert [row[2] for row in await h.ctx.db.read(outbox)] == [KEYS[1].ss58]

    async with open_runs(tmp_path / "second", state_dir=data) as h:
        assert [row[2] for row in await h.ctx.db.read(outbox)] == [KEYS[1].ss58]
        async with running_feed(h):
            await a_pass()
            second = await h.ctx.db.read(jobs)
            assert await h.ctx.db.read(outbox) == []
            await push(h, h.ctx.beacon.latest + 1)
            await a_pass()
            assert await h.ctx.db.read(jobs) == second
    by_subject = {s["hotkey"]: (step, job, created) for s, step, job, created, _ in second}
    assert by_subject[KEYS[0].ss58] == first[0][1:4]
    assert set(by_subject) == {KEYS[0].ss58, KEYS[1].ss58}
    assert [inputs["delta.bin"] for *_, inputs in second] == [DELTA_SHA, DELTA_SHA]


async def test_rows_of_a_run_without_a_dataset_wait_for_one(
    tmp_path: Path,
    built: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await scoring_flow(h, built, dataset=False)
        await uploaded(flow, KEYS[0])
        with caplog.at_level(logging.WARNING, logger="hypertrain.coordinator.services.scorefeed"):
            async with running_feed(h):
                await post_delta(flow, KEYS[0])
                await a_pass()
                await a_pass()
                assert await h.ctx.db.read(jobs) == []
                assert len(await h.ctx.db.read(outbox)) == 1
                await register(flow, built)
                await a_pass()
                assert [s for s, *_ in await h.ctx.db.read(jobs)] == [subject(flow, KEYS[0])]
                assert await h.ctx.db.read(outbox) == []
    warnings = [r.getMessage() for r in caplog.records if "no dataset registered" in r.message]
    assert len(warnings) == 1


def next_round(run_id: str, template: dict[str, Any]) -> dict[str, Any]:
    body = structure(RoundOpen, {**template, **HASHES})
    return seal(COORD, "RoundOpen", run_id, body, NEVER).to_json()


async def open_round_after(flow: Flow, w: int) -> None:
    """An external aggregator's RoundOpen(w + 1), posted once D reached ``d_upload(w)``."""
    prefix = f"/v1/aggregator/runs/{flow.run_id}/rounds/{w}"
    inputs = (await admin(flow.h, "GET", f"{prefix}/inputs")).json()
    d_upload = inputs["round_open"]["body"]["d_upload"]
    if flow.h.ctx.beacon.latest < d_upload:
        await flow.to(d_upload)
    template = (await admin(flow.h, "GET", f"{prefix}/inputs")).json()["next_round_template"]
    r = await admin(flow.h, "POST", f"{prefix}/aggregate", next_round(flow.run_id, template))
    assert r.status_code == 200, r.text


async def test_a_delta_of_a_round_far_behind_the_newest_is_fed(
    tmp_path: Path, built: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await scoring_flow(h, built)
        await uploaded(flow, KEYS[0])
        await post_delta(flow, KEYS[0])
        for w in range(OLD):
            await open_round_after(flow, w)
        assert (await h.client.get(f"{flow.runs}/rounds/{OLD}")).status_code == 200
        async with running_feed(h):
            await a_pass()
            fed = await h.ctx.db.read(jobs)
        genesis = await h.ctx.objects.get(fed[0][4]["state.bin"])
    assert [(s, step) for s, step, *_ in fed] == [(subject(flow, KEYS[0]), "public")]
    assert fed[0][4]["delta.bin"] == DELTA_SHA
    assert genesis == pack_state(init_params(manifest().model))


async def test_a_row_that_cannot_be_fed_does_not_hold_back_the_rows_behind_it(
    tmp_path: Path, built: Path, autojump_clock: trio.testing.MockClock
) -> None:
    lost = b"a delta whose object goes missing" * 10
    async with open_runs(tmp_path) as h:
        flow = await scoring_flow(h, built)
        first, second = sorted(KEYS[:2], key=lambda k: k.ss58)
        await uploaded(flow, first, lost)
        await uploaded(flow, second)
        await post_delta(flow, first, lost)
        await post_delta(flow, second)
        h.ctx.objects.path_of(hashlib.sha256(lost).hexdigest()).unlink()
        async with running_feed(h, batch=1):
            await a_pass()
            fed = await h.ctx.db.read(jobs)
            left = await h.ctx.db.read(outbox)
    assert [s for s, *_ in fed] == [subject(flow, second)]
    assert [row[2] for row in left] == [first.ss58]


async def test_the_genesis_state_is_made_once_per_run(
    tmp_path: Path,
    built: Path,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Round 0's start state is the model's whole initialisation: made for the first delta of
    the run and reused for the rest (it was made again for every delta)."""
    made: list[str] = []

    def counting(spec: Any) -> Any:
        made.append(spec.arch)
        return init_params(spec)

    monkeypatch.setattr("hypertrain.coordinator.services.scorefeed.init_params", counting)
    async with open_runs(tmp_path) as h:
        flow = await scoring_flow(h, built)
        for key in KEYS[:2]:
            await uploaded(flow, key)
        async with running_feed(h):
            for key in KEYS[:2]:
                await post_delta(flow, key)
                await a_pass()
            fed = await h.ctx.db.read(jobs)
    assert len(fed) == 2
    assert len({inputs["state.bin"] for *_, inputs in fed}) == 1
    assert len(made) == 1
