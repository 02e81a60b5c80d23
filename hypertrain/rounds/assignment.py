"""Which samples each slot trains on: the Feistel PRP and the per-round sample lists (spec 5.4).

The server, the miner and the auditor derive the same lists::

    B        = micro_batch * grad_accum * H                 samples per slot
    size     = n_slots * B                                   one round's block of positions
    base_0   = 0;  base_{w+1} = base_w + slots_w * B, moved up to the next multiple of n_samples
               when round w+1's block would straddle a data pass         (:func:`next_base`)
    e, off   = base_w // n_samples, base_w % n_samples
    samples(slot) = [EpochPRP_e(off + RoundPRP_w(slot * B + j)) for j < B]

``RoundPRP_w`` is the Feistel PRP on ``[0, size)`` keyed by ``assign_key(run_id, w,
drand_sig[d_assign])`` (unpredictable until ``d_assign``: nobody knows their slice in advance);
``EpochPRP_e`` is the Feistel PRP on ``[0, n_samples)`` keyed by ``epoch_key(run_id, e)`` (a
public shuffle of one data pass). Both are bijections and a block never straddles a pass, so the
slots' lists are disjoint and, inside one data pass, no sample is used twice across rounds.

With ``dataset.assign_unit = u`` (the later, v2 datasets) both PRPs act on units of ``u``
consecutive samples: ``B/u`` units per slot, the epoch PRP on ``[0, n_samples/u)``, and unit
``k`` expands to samples ``k*u .. k*u+u-1`` in order (the reference's ``assign_round(unit=)``).

Decisions where spec 5.4 is loose, each pinned by a test:

- ``base`` is the caller's (the store keeps it per round); :func:`next_base` is the rule that
  produces it. "Straddle" is decided with the *next* round's slot count, as the reference
  store's ``_next_base(base, prev_slots, slots)`` does; round 0 is ``next_base(0, 0, slots)``.
- a roster whose block exceeds the dataset (``slots * B > n_samples``) is a 409
  :class:`AssignmentError`, as is a ``base`` whose block would straddle a data pass.
- the slot of each hotkey comes from the RoundOpen roster (slots must be ``0..n-1``, once each);
  the result is ordered by slot.

Speed: the round function is :func:`hypertrain.protocol.hashes.feistel_round_fn` (the prefix
hashed once). A PRP on a domain below 2^20 tabulates it up front (``8 * 2^half`` calls, at most
8192), below 2^28 it fills the tables on use, above it hashes every time. The PRPs of the last 16
keys are cached, so the epoch PRP of a data pass is built once; ``bench/rounds.py`` prints the
cost of a first and of a further round of 8 slots x 240 samples.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Final

from attrs import field, frozen

from hypertrain.protocol.errors import Conflict
from hypertrain.protocol.hashes import (
    FEISTEL_ROUNDS,
    assign_key,
    assignment_hash,
    epoch_key,
    feistel_half,
    feistel_round_fn,
    parse_hex32,
)
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.messages import RosterEntry
from hypertrain.protocol.validators import pos_int

__all__ = [
    "AssignParams",
    "Assignment",
    "AssignmentError",
    "FeistelPRP",
    "assign",
    "next_base",
    "step_ids",
    "window_ids",
]

_EAGER_MAX_HALF: Final = 10
"""Domains below 2^20: tabulate the round function up front (8 * 1024 hashes at most)."""
_LAZY_MAX_HALF: Final = 14
"""Domains below 2^28: fill the tables on use; larger domains hash every time."""
_U64_MAX: Final = 2**64 - 1


class AssignmentError(Conflict):
    """The roster does not fit the dataset, or a base would straddle a data pass (409)."""


class FeistelPRP:
    """The keyed pseudo-random permutation of ``[0, n)`` of spec 2.5.

    A balanced 8-round Feistel network on ``2 * half`` bits (``half = feistel_half(n)``); one
    round maps ``(L, R) -> (R, L xor F(r, R))`` with ``F = feistel_round(n, key, r, R, half)``;
    outputs ``>= n`` are re-encrypted until they land in range (cycle walking; the domain is
    below ``4n`` so fewer than 4 walks are expected). :meth:`inverse` walks back the same cycle.
    """

    __slots__ = ("_full", "_mask", "_round_fn", "_tables", "half", "key", "n")

    def __init__(self, n: int, key: bytes) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= _U64_MAX:
            raise ValueError(f"PRP domain size must be an int in [1, 2^64), got {n!r}")
        if not isinstance(key, bytes) or len(key) != 32:
            raise ValueError("PRP key must be 32 raw bytes")
        self.n = n
        self.key = key
        self.half = half = feistel_half(n)
        self._mask = (1 << half) - 1
        self._full = half <= _EAGER_MAX_HALF
        self._round_fn = f = feistel_round_fn(n, key, half)
        self._tables: list[list[int]] | None = None
        if self._full:  # small domains: tabulate F once, then encrypt by lookups alone
            self._tables = [[f(r, x) for x in range(1 << half)] for r in range(FEISTEL_ROUNDS)]
        elif half <= _LAZY_MAX_HALF:  # -1 = not computed yet
            self._tables = [[-1] * (1 << half) for _ in range(FEISTEL_ROUNDS)]

    def __repr__(self) -> str:
        return f"FeistelPRP(n={self.n}, key={self.key.hex()[:16]}...)"

    def _f(self, r: int, x: int) -> int:
        tables = self._tables
        if tables is None:
            return self._round_fn(r, x)
        value = tables[r][x]
        if value < 0:
            value = tables[r][x] = self._round_fn(r, x)
        return value

    def _encrypt(self, x: int) -> int:
        half = self.half
        left, right = x >> half, x & self._mask
        if self._full:
            # (L, R) -> (R, L ^ F(R)) twice is L ^= F0(R); R ^= F1(L): 8 rounds in place.
            t0, t1, t2, t3, t4, t5, t6, t7 = self._tables  # type: ignore[misc]
            left ^= t0[right]
            right ^= t1[left]
            left ^= t2[right]
            right ^= t3[left]
            left ^= t4[right]
            right ^= t5[left]
            left ^= t6[right]
            right ^= t7[left]
        else:
            f = self._f
            for r in range(FEISTEL_ROUNDS):
                left, right = right, left ^ f(r, right)
        return (left << half) | right

    def _decrypt(self, y: int) -> int:
        left, right = y >> self.half, y & self._mask
        for r in reversed(range(FEISTEL_ROUNDS)):
            left, right = right ^ self._f(r, left), left
        return (left << self.half) | right

    def _check(self, x: int) -> None:
        if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < self.n:
            raise ValueError(f"{x!r} is outside the PRP domain [0, {self.n})")

    def permute(self, x: int) -> int:
        """The image of ``x`` in ``[0, n)``."""
        self._check(x)
        y = self._encrypt(x)
        while y >= self.n:
            y = self._encrypt(y)
        return y

    def inverse(self, y: int) -> int:
        """The ``x`` with ``permute(x) == y``."""
        self._check(y)
        x = self._decrypt(y)
        while x >= self.n:
            x = self._decrypt(x)
        return x


@functools.lru_cache(maxsize=16)
def _prp(n: int, key: bytes) -> FeistelPRP:
    """A shared PRP (its memo tables survive across rounds of one data pass)."""
    return FeistelPRP(n, key)


@frozen
class AssignParams:
    """What the assignment needs from a manifest: ``n_samples``, the per-slot ``batch``
    (``micro_batch * grad_accum * H``) and the assignment ``unit`` (1 unless the dataset has
    ``assign_unit``); ``batch`` and ``n_samples`` are multiples of ``unit``."""

    n_samples: int = field(validator=pos_int)
    batch: int = field(validator=pos_int)
    unit: int = field(default=1, validator=pos_int)

    def __attrs_post_init__(self) -> None:
        if self.batch % self.unit or self.n_samples % self.unit:
            raise ValueError("batch and n_samples must be multiples of the assignment unit")

    @classmethod
    def from_manifest(cls, manifest: RunManifest) -> AssignParams:
        """The parameters a RunManifest fixes."""
        inner = manifest.inner
        return cls(
            n_samples=manifest.dataset.n_samples,
            batch=inner.micro_batch * inner.grad_accum * inner.H,
            unit=manifest.dataset.assign_unit or 1,
        )


@frozen
class Assignment:
    """One slot's samples in a round: ``{hotkey, slot, samples, assignment_hash}``, the round
    view's ``assignment[]`` item (``unstructure(a)`` writes it, the miner structures it)."""

    hotkey: str
    slot: int
    samples: tuple[int, ...]
    assignment_hash: str


def _params(source: AssignParams | RunManifest) -> AssignParams:
    return source if isinstance(source, AssignParams) else AssignParams.from_manifest(source)


def next_base(base: int, prev_slots: int, slots: int, params: AssignParams | RunManifest) -> int:
    """The base of the next round: ``base + prev_slots * B``, moved up to the next multiple of
    ``n_samples`` when a block of ``slots * B`` positions from there would straddle a data pass.

    Round 0 is ``next_base(0, 0, slots, params)`` (= 0). Raises :class:`AssignmentError` when
    ``slots * B > n_samples`` (no block of that size fits one pass).
    """
    p = _params(params)
    if min(base, prev_slots, slots) < 0:
        raise ValueError("base and slot counts must be >= 0")
    if slots * p.batch > p.n_samples:
        raise AssignmentError(
            f"{slots} slots x {p.batch} samples exceed the dataset's {p.n_samples} samples"
        )
    nxt = base + prev_slots * p.batch
    if slots and (nxt + slots * p.batch - 1) // p.n_samples != nxt // p.n_samples:
        nxt = (nxt // p.n_samples + 1) * p.n_samples
    return nxt


def _slots(roster_slots: Iterable[RosterEntry | tuple[str, int]]) -> list[tuple[int, str]]:
    pairs = [
        (entry.slot, entry.hotkey) if isinstance(entry, RosterEntry) else (entry[1], entry[0])
        for entry in roster_slots
    ]
    pairs.sort()
    if [slot for slot, _ in pairs] != list(range(len(pairs))):
        raise ValueError("roster slots must be 0..n-1, each once")
    if len({hotkey for _, hotkey in pairs}) != len(pairs):
        raise ValueError("a hotkey holds two slots")
    return pairs


def assign(
    params: AssignParams | RunManifest,
    run_id: str,
    w: int,
    drand_sig: bytes,
    roster_slots: Iterable[RosterEntry | tuple[str, int]],
    *,
    base: int,
) -> list[Assignment]:
    """Every slot's samples of round ``w`` (spec 5.4), ordered by slot.

    ``run_id`` is the run's hex64 id, ``drand_sig`` the 48 raw bytes of ``drand_sig[d_assign]``,
    ``roster_slots`` the RoundOpen roster (``RosterEntry`` or ``(hotkey, slot)`` pairs) and
    ``base`` the round's base (:func:`next_base`). An empty roster assigns nothing.
    """
    p = _params(params)
    pairs = _slots(roster_slots)
    run = parse_hex32(run_id, "run_id")
    key = assign_key(run, w, drand_sig)  # validates w and the signature even for no slots
    if not pairs:
        return []
    size = len(pairs) * p.batch
    if size > p.n_samples:
        raise AssignmentError(
            f"{len(pairs)} slots x {p.batch} samples exceed the dataset's {p.n_samples} samples"
        )
    if isinstance(base, bool) or not isinstance(base, int) or base < 0 or base % p.unit:
        raise ValueError(f"base must be an int >= 0 and a multiple of {p.unit}, got {base!r}")
    epoch, offset = divmod(base, p.n_samples)
    if offset + size > p.n_samples:
        raise AssignmentError(f"round block at base {base} straddles a data pass")
    unit = p.unit
    per_slot = p.batch // unit
    round_prp = _prp(len(pairs) * per_slot, key)
    epoch_prp = _prp(p.n_samples // unit, epoch_key(run, epoch))
    start = offset // unit
    out = []
    for slot, hotkey in pairs:
        units = [
            epoch_prp.permute(start + round_prp.permute(slot * per_slot + k))
            for k in range(per_slot)
        ]
        samples = tuple(units if unit == 1 else [u * unit + j for u in units for j in range(unit)])
        out.append(Assignment(hotkey, slot, samples, assignment_hash(run, w, slot, samples)))
    return out


def step_ids(samples: Sequence[int], t: int, per_step: int) -> tuple[int, ...]:
    """The ids inner step ``t`` (``1..H``) trains on: ``samples[(t-1)*per_step : t*per_step]``
    with ``per_step = micro_batch * grad_accum`` (micro-batch ``j`` = the next ``mb`` ids)."""
    if t < 1 or per_step < 1 or t * per_step > len(samples):
        raise ValueError(f"step {t} is outside the {len(samples)} assigned samples")
    return tuple(samples[(t - 1) * per_step : t * per_step])


def window_ids(samples: Sequence[int], t: int, J: int, per_step: int) -> tuple[int, ...]:  # noqa: N803
    """The ids of steps ``t-J+1 .. t`` that leaf ``t`` covers (empty for ``t = 0``); their
    ``batch_ids_sha256`` is the leaf's (spec 5.5)."""
    if t == 0:
        return ()
    if J < 1 or t < J or t % J:
        raise ValueError(f"leaf t={t} is not a positive multiple of J={J}")
    return tuple(samples[(t - J) * per_step : t * per_step])
