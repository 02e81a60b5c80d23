"""The sampled re-score draw: which steps settled by agreement the trusted evaluator scores
again (issue 19 item 3). Pure: no clock, no I/O.

The rule, deterministic and checkable by anyone who knows a step's id and the beacon:

1. A step settled by agreement gets its **draw round** from the first beacon observer that runs
   after the settlement (:func:`draw_round`): ``max(D, R_wall) + 1``, where ``D`` is the latest
   stored round and ``R_wall`` the round the wall clock has made due at that instant. Both are
   at or after every round published while the nodes answered, so the draw round's randomness
   did not exist when they answered: nobody can know in advance whether a step will be drawn.
2. When the draw round is stored (or, had the daemon missed it, the first stored round after
   it), its randomness ``r`` (32 bytes) decides (:func:`is_drawn`)::

       h = sha256(b"ht-rescore|" || r || b"|" || utf8(job_id))
       drawn  <=>  int_be(h) * 1000 < permille * 2^256

   so a step is drawn with probability exactly ``permille / 1000`` over the beacon's randomness
   (``permille`` is ``HYPERTRAIN_COMPUTE_AUDIT_PERMILLE``, default 50: one step in twenty).
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["DOMAIN", "draw_round", "is_drawn", "rescore_hash"]

DOMAIN: Final = b"ht-rescore|"
_SPACE: Final = 1 << 256


def draw_round(latest: int, due: int) -> int:
    """The draw round of a step seen settled when ``latest`` was the latest stored round and
    ``due`` the round due by the wall clock (rule 1)."""
    return max(latest, due) + 1


def rescore_hash(randomness: str, job_id: str) -> bytes:
    """``sha256(DOMAIN || randomness || "|" || job_id)``; ``randomness`` is the round's 64 hex."""
    seed = bytes.fromhex(randomness)
    if len(seed) != 32:
        raise ValueError("a beacon round's randomness is 32 bytes")
    return hashlib.sha256(DOMAIN + seed + b"|" + job_id.encode()).digest()


def is_drawn(randomness: str, job_id: str, permille: int) -> bool:
    """Whether the round of ``randomness`` draws step ``job_id`` at ``permille`` (rule 2)."""
    if not 0 <= permille <= 1000:
        raise ValueError("permille must be in 0..1000")
    return int.from_bytes(rescore_hash(randomness, job_id), "big") * 1000 < permille * _SPACE
