"""Bearer-token files: what counts as the one token a file holds.

A token file holds exactly one token: its content, with surrounding whitespace stripped, must be
non-empty, at most :data:`MAX_TOKEN_FILE_BYTES` long and made of visible ASCII only (``!`` to
``~``: no whitespace, control or non-ASCII byte), so that any token the daemon accepts can be
sent in an ``Authorization`` header (a base64 token's ``+/=`` included). The daemon reads its
admin/worker/internal token files with this rule, and so do the commands that present a token
(``hypertrain aggregate --admin-token-file``, ``hypertrain-auditor --token-file``, through
:func:`hypertrain.cli.common.read_token_file`, and ``hypertrain beacon push --token-file``,
through :func:`hypertrain.beacon.sinks.read_token`); all read the file only when it is private
(:func:`hypertrain.protocol.keys.read_private_file`).
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_TOKEN_FILE_BYTES", "token_in"]

MAX_TOKEN_FILE_BYTES: Final = 4096
"""A longer token file is refused unread past this."""


def token_in(data: bytes) -> bytes | None:
    """The token of a file's first ``MAX_TOKEN_FILE_BYTES + 1`` bytes, or None when they do not
    hold exactly one token (module doc)."""
    token = data.strip()
    if len(data) > MAX_TOKEN_FILE_BYTES or not token or any(not 0x21 <= c <= 0x7E for c in token):
        return None
    return token
