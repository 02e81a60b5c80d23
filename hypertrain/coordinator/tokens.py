"""The coordinator's bearer tokens (spec section 9: admin, worker, internal); no HTTP here.

Token files are named by the settings (``CHALLENGE_ADMIN_TOKEN_FILE`` ...) and re-read as the
operator guide asks: a changed or removed file takes effect with the next request. Re-reading
every request would cost throughput (DESIGN.md section 8), so :class:`TokenFiles` ``stat``s the
file per request and re-reads it only when its identity, mode or owner changed
(:func:`~hypertrain.protocol.keys.private_file_key`).

A token file is a secret like K_coord and is read with the same check
(:func:`~hypertrain.protocol.keys.read_private_file`): a regular file, not a symlink, owned by
the daemon's user, without group or other permission bits (or a systemd credential). A file
that fails it is refused as if unset, and the reason names the file and what is wrong.

========================================  ===============================================
the route's token file unset/missing      :class:`NotConfigured` (503), naming the token
the file unsafe (owner, mode, symlink)    :class:`NotConfigured` (503), naming the file
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

from hypertrain.protocol.errors import AuthError, KeyfileError, NotConfigured
from hypertrain.protocol.keys import PrivateFileKey, private_file_key, read_private_file
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
    key: PrivateFileKey
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
            key = private_file_key(os.stat(path, follow_symlinks=False))
        except OSError as e:
            self._cache.pop(kind, None)
            raise NotConfigured(
                f"{kind.value} token file unreadable ({kind.env}: {e.strerror})"
            ) from e
        cached = self._cache.get(kind)
        if cached is not None and cached.key == key:
            return cached.digest
        self._cache.pop(kind, None)
        # The key was taken before the read: a file replaced in between is cached under the
        # older key, which no longer matches, and is simply read again at the next request.
        cached = _Cached(key, self._read(kind, path))
        self._cache[kind] = cached
        return cached.digest

    def _read(self, kind: TokenKind, path: Path) -> bytes:
        self.reads += 1
        try:
            data = read_private_file(path, MAX_TOKEN_FILE_BYTES, f"{kind.value} token file")
        except KeyfileError as e:
            raise NotConfigured(f"{kind.value} token file refused ({kind.env}: {e})") from e
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
        return hashlib.sha256(token).digest()

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
