"""``GET /version`` and ``GET /health`` (spec section 9)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import trio
import trio.testing

from hypertrain.coordinator.web.system import CAPABILITY_ROUTES
from hypertrain.store import get_meta
from tests.coordinator.harness import open_harness


async def test_version_is_exactly_the_contract(tmp_path: Path) -> None:
    async with open_harness(tmp_path) as h:
        response = await h.client.get("/version")
        assert response.status_code == 200
        assert response.json() == {
            "slug": "hypertrain",
            "version": "0.1.0",
            "contract": 1,
            "capabilities": ["checkpoints", "get_weights", "proxy_routes"],
        }


async def test_version_advertises_no_capability_whose_route_is_missing(tmp_path: Path) -> None:
    async with open_harness(tmp_path) as h:
        advertised = (await h.client.get("/version")).json()["capabilities"]
        for capability, route in CAPABILITY_ROUTES.items():
            status = (await h.client.get(route)).status_code
            assert (capability in advertised) == (status != 404), (capability, status)


async def test_health_is_ok_with_everything_in_place_and_writes_the_db(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # Virtual time: on the real clock a second could tick between the write and the check.
    async with open_harness(tmp_path) as h:
        response = await h.client.get("/health")
        assert response.status_code == 200
        body = response.json()
        assert body["ok"] is True
        assert body["ledger"] == {
            "records": 1,  # the init record of a fresh journal
            "queued_events": 0,
            "answers": 0,
            "minted": 0,
            "burned": 0,
            "paid": 0,
            "pending": 0,
            "debt": 0,
            "last_event_at": None,
            "last_epoch": None,
            "last_epoch_at": None,
        }
        written = await h.ctx.db.read(get_meta, "health_checked_at")
        assert written == str(int(h.wall.now()))


async def _health(h: Any) -> tuple[int, dict[str, Any]]:
    response = await h.client.get("/health")
    return response.status_code, response.json()


async def test_health_503_without_internal_token(tmp_path: Path) -> None:
    async with open_harness(tmp_path, internal_token_file=None) as h:
        status, body = await _health(h)
        assert status == 503
        assert body["reasons"] == [
            "internal token not configured (CHALLENGE_INTERNAL_TOKEN_FILE is unset)"
        ]
        assert body["detail"] == body["reasons"][0]
    async with open_harness(tmp_path / "2") as h:
        h.secrets.internal.unlink()
        status, body = await _health(h)
        assert status == 503
        assert "internal token file unreadable" in body["reasons"][0]


async def test_health_503_without_or_with_an_unsafe_coord_key(tmp_path: Path) -> None:
    async with open_harness(tmp_path, coord_key_file=None, internal_token_file=None) as h:
        status, body = await _health(h)
        assert status == 503
        assert len(body["reasons"]) == 2
        assert "K_coord not configured (HYPERTRAIN_COORD_KEY_FILE is unset)" in body["reasons"]
    async with open_harness(tmp_path / "2") as h:
        assert (await _health(h))[0] == 200
        h.secrets.coord_key.chmod(0o644)  # noticed at once, although the key was cached
        status, body = await _health(h)
        assert status == 503
        assert body["reasons"][0].startswith("K_coord key file unusable: ")
        assert "chmod 600" in body["reasons"][0]
        h.secrets.coord_key.chmod(0o600)
        assert (await _health(h))[0] == 200
        h.secrets.coord_key.unlink()
        status, body = await _health(h)
        assert "K_coord key file unreadable" in body["reasons"][0]


class _ReadOnlyDb:
    """A database that refuses writes, as a full disk or a read-only mount would."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def read(self, fn: Any, *args: Any) -> Any:
        return await self._inner.read(fn, *args)

    async def write(self, fn: Any, *args: Any) -> Any:
        raise sqlite3.OperationalError("attempt to write a readonly database")


async def test_health_503_when_the_database_refuses_writes(tmp_path: Path) -> None:
    async with open_harness(tmp_path) as h:
        h.ctx.db = _ReadOnlyDb(h.ctx.db)  # type: ignore[assignment]
        status, body = await _health(h)
        assert status == 503
        assert body["reasons"] == [
            "database not writable: OperationalError: attempt to write a readonly database"
        ]


async def test_coord_keypair_is_cached_by_file_identity(tmp_path: Path) -> None:
    async with open_harness(tmp_path) as h:
        first = h.ctx.coord_keypair()
        assert h.ctx.coord_keypair() is first
        h.secrets.coord_key.unlink()
        h.secrets.coord_key.write_text(bytes(range(64, 96)).hex())
        h.secrets.coord_key.chmod(0o600)
        second = h.ctx.coord_keypair()
        assert second.public_key != first.public_key


async def test_health_names_every_unsafe_token_file_and_why(tmp_path: Path) -> None:
    link = tmp_path / "worker-link"
    link.symlink_to(tmp_path / "secrets" / "worker_token")  # a worker token file of its own
    async with open_harness(tmp_path, worker_token_file=link) as h:
        h.secrets.worker.chmod(0o644)  # what the link points at is not the question
        status, body = await _health(h)
        assert status == 503
        assert len(body["reasons"]) == 1
        worker = body["reasons"][0]
        assert worker.startswith("worker token file refused (CHALLENGE_WORKER_TOKEN_FILE: ")
        assert "symlink" in worker
    async with open_harness(tmp_path / "2") as h:
        assert (await _health(h))[0] == 200
        h.secrets.admin.chmod(0o640)  # noticed at once, although the token was cached
        status, body = await _health(h)
        assert status == 503
        (admin,) = body["reasons"]
        assert admin.startswith("admin token file refused (CHALLENGE_ADMIN_TOKEN_FILE: ")
        assert f"{h.secrets.admin}: mode 0640" in admin
        assert "chmod 600" in admin
        h.secrets.admin.chmod(0o600)
        assert (await _health(h))[0] == 200
