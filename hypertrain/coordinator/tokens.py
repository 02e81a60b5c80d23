"""The coordinator's bearer tokens (spec section 9: admin, worker, internal); no HTTP here.

Token files are named by the settings (``CHALLENGE_ADMIN_TOKEN_FILE`` ...) and re-read as the
operator guide asks: a changed or removed file takes effect with the next request. Re-reading
every request would cost throughput (DESIGN.md section 8), so :class:`TokenFiles` ``stat``s the
file per request and re-reads it only when its ``(mtime_ns, size, inode)`` changed.

========================================  ===============================================
the route's token file unset/missing      :class:`NotConfigured` (503), naming the token
no or malformed ``Authorization: Bearer``  :class:`AuthError` (401)
wrong token                               :class:`AuthError` (401)
========================================  ===============================================

Tokens are compared as sha256 digests with :func:`hmac.compare_digest`, so the time taken does
not depend on where a wrong token first differs, nor on its length.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
from pathlib import Path

import attrs

from hypertrain.protocol.errors import AuthError, NotConfigured
from hypertrain.protocol.tokens import MAX_TOKEN_FILE_BYTES, token_in

__all__ = ["MAX_TOKEN_FILE_BYTES", "TokenFiles", "TokenKind", "bearer_token"]


class TokenKind(enum.Enum):
    """The three bearer tokens, named as the operator sees them."""

    ADMIN = "admin"
    WORKER = "worker"
    INTERNAL = "internal"

    @property
    def env(self) -> str:
        """The environment variable that names this token's file."""
        return f"CHALLENGE_{self.name}_TOKEN_FILE"


@attrs.frozen
class _Cached:
    key: tuple[int, int, int]
    digest: bytes


class TokenFiles:
    """The token files of one coordinator, each cached by ``(mtime_ns, size, inode)``."""

    def __init__(
        self, *, admin: Path | None = None, worker: Path | None = None, internal: Path | None = None
    ) -> None:
        self._paths = {
            TokenKind.ADMIN: admin,
            TokenKind.WORKER: worker,
            TokenKind.INTERNAL: internal,
        }
        self._cache: dict[TokenKind, _Cached] = {}
        self.reads = 0
        """How many times a token file was actually read (not served from the cache)."""

    def path(self, kind: TokenKind) -> Path | None:
        """The configured file of ``kind``, or None."""
        return self._paths[kind]

    def digest(self, kind: TokenKind) -> bytes:
        """sha256 of the current token of ``kind``; :class:`NotConfigured` when unusable."""
        path = self._paths[kind]
        if path is None:
            raise NotConfigured(f"{kind.value} token not configured ({kind.env} is unset)")
        try:
            st = os.stat(path)
        except OSError as e:
            self._cache.pop(kind, None)
            raise NotConfigured(
                f"{kind.value} token file unreadable ({kind.env}: {e.strerror})"
            ) from e
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        cached = self._cache.get(kind)
        if cached is not None and cached.key == key:
            return cached.digest
        cached = self._read(kind, path)
        self._cache[kind] = cached
        return cached.digest

    def _read(self, kind: TokenKind, path: Path) -> _Cached:
        self.reads += 1
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                data = f.read(MAX_TOKEN_FILE_BYTES + 1)
        except OSError as e:
            raise NotConfigured(
                f"{kind.value} token file unreadable ({kind.env}: {e.strerror})"
            ) from e
        token = token_in(data)
        if token is None:
            raise NotConfigured(
                f"{kind.value} token file does not hold one token ({kind.env}: empty, "
                f"too long or containing whitespace)"
            )
        # The key comes from the open file, so a file replaced between stat and open is
        # cached under its own identity and re-read on the next request.
        return _Cached((st.st_mtime_ns, st.st_size, st.st_ino), hashlib.sha256(token).digest())

    def check(self, kind: TokenKind, presented: str | None) -> None:
        """Raise unless ``presented`` is the current token of ``kind`` (see the module doc)."""
        expected = self.digest(kind)
        if presented is None:
            raise AuthError(f"missing bearer token ({kind.value} route)")
        given = hashlib.sha256(presented.encode("utf-8", "surrogateescape")).digest()
        if not hmac.compare_digest(given, expected):
            raise AuthError(f"wrong {kind.value} token")

    def readable(self, kind: TokenKind) -> str | None:
        """None if the token of ``kind`` is usable, else the reason (for ``/health``)."""
        try:
            self.digest(kind)
        except NotConfigured as e:
            return e.detail
        return None


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token
