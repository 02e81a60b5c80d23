"""Bearer-token auth: token files read per request (cached by identity), 401/403/503."""

from __future__ import annotations

import hmac
import os
from pathlib import Path

import pytest
from quart import Response
from quart_trio import QuartTrio

from hypertrain.coordinator import tokens as tokens_module
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.tokens import TokenFiles, TokenKind, bearer_token
from hypertrain.coordinator.web.auth import (
    SLUG_HEADER,
    require_admin,
    require_internal,
    require_worker,
)
from hypertrain.coordinator.web.http import json_response
from tests.coordinator.harness import (
    ADMIN_TOKEN,
    INTERNAL_TOKEN,
    WORKER_TOKEN,
    Harness,
    open_harness,
    write_secret,
)


def _guarded_routes(app: QuartTrio, ctx: Coordinator) -> None:
    """Test-only routes behind each kind of auth."""

    async def admin() -> Response:
        require_admin(ctx)
        return json_response({"ok": "admin"})

    async def worker() -> Response:
        require_worker(ctx)
        return json_response({"ok": "worker"})

    async def internal() -> Response:
        require_internal(ctx)
        return json_response({"ok": "internal"})

    app.add_url_rule("/t/admin", "t.admin", admin, methods=["GET"])
    app.add_url_rule("/t/worker", "t.worker", worker, methods=["GET"])
    app.add_url_rule("/t/internal", "t.internal", internal, methods=["GET"])


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _get(h: Harness, path: str, headers: dict[str, str] | None = None) -> tuple[int, object]:
    response = await h.client.get(path, headers=headers or {})
    return response.status_code, response.json()


async def test_each_kind_accepts_its_own_token_only(tmp_path: Path) -> None:
    async with open_harness(tmp_path, extra_routes=_guarded_routes) as h:
        assert await _get(h, "/t/admin", _bearer(ADMIN_TOKEN)) == (200, {"ok": "admin"})
        assert await _get(h, "/t/worker", _bearer(WORKER_TOKEN)) == (200, {"ok": "worker"})
        slug = {SLUG_HEADER: "hypertrain"}
        assert await _get(h, "/t/internal", {**_bearer(INTERNAL_TOKEN), **slug}) == (
            200,
            {"ok": "internal"},
        )
        status, body = await _get(h, "/t/admin", _bearer(WORKER_TOKEN))
        assert status == 401
        assert body == {"detail": "wrong admin token"}
        assert (await _get(h, "/t/worker", _bearer(ADMIN_TOKEN)))[0] == 401


async def test_missing_or_malformed_authorization_is_401(tmp_path: Path) -> None:
    async with open_harness(tmp_path, extra_routes=_guarded_routes) as h:
        for headers in ({}, {"Authorization": ADMIN_TOKEN}, {"Authorization": "Basic abc"}):
            status, body = await _get(h, "/t/admin", headers)
            assert status == 401, headers
            assert isinstance(body, dict)
            assert "detail" in body


async def test_internal_needs_the_slug_header(tmp_path: Path) -> None:
    async with open_harness(tmp_path, extra_routes=_guarded_routes) as h:
        status, body = await _get(h, "/t/internal", _bearer(INTERNAL_TOKEN))
        assert status == 403
        assert body == {"detail": f"{SLUG_HEADER} must be 'hypertrain', got None"}
        wrong = {**_bearer(INTERNAL_TOKEN), SLUG_HEADER: "other"}
        assert (await _get(h, "/t/internal", wrong))[0] == 403
        # The token is checked before the slug: a wrong token is 401 whatever the slug says.
        assert (await _get(h, "/t/internal", {**_bearer("x"), SLUG_HEADER: "hypertrain"}))[0] == 401


async def test_unset_or_missing_token_file_is_503_naming_the_token(tmp_path: Path) -> None:
    async with open_harness(tmp_path, extra_routes=_guarded_routes, worker_token_file=None) as h:
        status, body = await _get(h, "/t/worker", _bearer(WORKER_TOKEN))
        assert (status, body) == (
            503,
            {"detail": "worker token not configured (CHALLENGE_WORKER_TOKEN_FILE is unset)"},
        )
        h.secrets.admin.unlink()
        status, body = await _get(h, "/t/admin", _bearer(ADMIN_TOKEN))
        assert status == 503
        assert isinstance(body, dict)
        assert "admin token file unreadable" in body["detail"]
        assert "CHALLENGE_ADMIN_TOKEN_FILE" in body["detail"]


async def test_a_changed_token_file_takes_effect_at_once(tmp_path: Path) -> None:
    async with open_harness(tmp_path, extra_routes=_guarded_routes) as h:
        assert (await _get(h, "/t/admin", _bearer(ADMIN_TOKEN)))[0] == 200
        # Same size, same second: only the inode (rename) or mtime_ns tells them apart.
        replacement = tmp_path / "secrets" / "admin_token.new"
        write_secret(replacement, "admin-token.2")
        os.replace(replacement, h.secrets.admin)
        assert (await _get(h, "/t/admin", _bearer(ADMIN_TOKEN)))[0] == 401
        assert (await _get(h, "/t/admin", _bearer("admin-token.2")))[0] == 200
        # Rewritten in place (same inode) with another length.
        write_secret(h.secrets.admin, "admin-token.three")
        assert (await _get(h, "/t/admin", _bearer("admin-token.2")))[0] == 401
        assert (await _get(h, "/t/admin", _bearer("admin-token.three")))[0] == 200
        h.secrets.admin.unlink()
        assert (await _get(h, "/t/admin", _bearer("admin-token.three")))[0] == 503
        write_secret(h.secrets.admin, "admin-token.three")
        assert (await _get(h, "/t/admin", _bearer("admin-token.three")))[0] == 200


def test_token_files_are_cached_until_they_change(tmp_path: Path) -> None:
    path = write_secret(tmp_path / "t", "tok")
    tokens = TokenFiles(admin=path)
    for _ in range(5):
        tokens.check(TokenKind.ADMIN, "tok")
    assert tokens.reads == 1
    write_secret(path, "other")
    tokens.check(TokenKind.ADMIN, "other")
    assert tokens.reads == 2


def test_a_token_file_others_may_read_is_refused_until_it_is_private_again(
    tmp_path: Path,
) -> None:
    path = write_secret(tmp_path / "t", "tok")
    tokens = TokenFiles(admin=path)
    tokens.check(TokenKind.ADMIN, "tok")
    for mode in (0o644, 0o604, 0o660):
        path.chmod(mode)
        with pytest.raises(tokens_module.NotConfigured, match=f"mode 0{mode:o} lets others"):
            tokens.check(TokenKind.ADMIN, "tok")  # refused although the token was cached
    path.chmod(0o600)
    tokens.check(TokenKind.ADMIN, "tok")
    link = tmp_path / "link"
    link.symlink_to(path)
    refused = TokenFiles(worker=link).readable(TokenKind.WORKER)
    assert refused is not None
    assert refused.startswith("worker token file refused (CHALLENGE_WORKER_TOKEN_FILE: ")


def test_empty_or_multi_word_token_file_is_not_configured(tmp_path: Path) -> None:
    for content in ("", "   \n", "two words"):
        tokens = TokenFiles(admin=write_secret(tmp_path / "t", content))
        assert tokens.readable(TokenKind.ADMIN) is not None, content


def test_tokens_are_compared_as_equal_length_digests_in_constant_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(tokens_module.hmac, "compare_digest", spy)
    tokens = TokenFiles(admin=write_secret(tmp_path / "t", "tok"))
    tokens.check(TokenKind.ADMIN, "tok")
    for wrong in ("", "t", "tok-but-much-longer-than-the-real-one", "xok"):
        with pytest.raises(tokens_module.AuthError):
            tokens.check(TokenKind.ADMIN, wrong)
    assert len(calls) == 5
    assert all(len(a) == len(b) == 32 for a, b in calls)


def test_bearer_token_parsing() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer   abc ") == "abc"
    assert bearer_token("Bearer") is None
    assert bearer_token("Token abc") is None
    assert bearer_token(None) is None
