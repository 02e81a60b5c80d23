"""A dispute's bisection as pure values (spec 6.4; issue 14): points, stages, claims, rulings.

A dispute narrows the disagreement between the disputing miner and the disputed auditor about
round ``w`` down to one operation of one inner step. Both parties compute every hash below from
their own recomputation; nobody trusts the other's.

**Points.** A point is one hash both parties can compute (:class:`Point`, canonical):

- ``step`` point ``t``: ``tensor_root(theta_t, m_t, v_t, step_t)`` (spec 2.5) of the training
  state after inner step ``t`` of the round (``t = (k-1)*J`` is the state the interval starts
  from);
- ``layer`` points inside step ``t``, ``i`` in ``0 .. n_layers + 1``: ``0`` is the step's input
  tokens, ``i`` (``1 .. n_layers``) the output of layer ``i - 1`` (its ``mlp_residual``) and
  ``n_layers + 1`` the state after the step, which *is* step point ``t``;
- ``op`` points inside layer ``l`` of step ``t``, ``k`` in ``0 .. len(ops(l))``: ``0`` is layer
  point ``l`` (the layer's input), ``k`` the output of op ``ops(l)[k - 1]``; the last is layer
  point ``l + 1``. ``ops(l)`` is :data:`OPS` (layer 0: ``embed`` first), the tail "layer"
  ``l = n_layers`` is :data:`TAIL_OPS` whose last op, ``update``, is the state after the step.

A forward point's hash is ``sha256`` over the concatenated per-micro-batch digests
``sha256(f"{dtype}|{shape}|" || raw bytes)`` (:mod:`hypertrain.trainer.trace`).
:func:`canonical` maps every (level, index) to one :class:`Point`, so the same quantity reached
from two levels is one claim.

**Stages.** A :class:`Stage` is one bisection round: ``level``, the step ``t`` (layer and op
levels), the layer ``l`` (op level), the interval ``[a, b]`` and ``N = min(arity, b - a)``.
Each party publishes the ``N + 1`` hashes at ``p_j = a + ceil(j (b - a) / N)``
(:func:`points`). :func:`advance` compares them:

- the first hashes differ: a start point is disputed (only possible in a level's first round,
  where the start was never claimed): the referee decides that point (``kind = "start"``);
- else the first ``j`` with differing hashes gives the next interval ``[p_{j-1}, p_j]``; an
  interval of length 1 descends (:func:`first_stage` and ``_settle``): a step ``[t-1, t]`` opens
  the layer level of step ``t`` on ``[0, n_layers + 1]``; a layer ``[l, l+1]`` the op level of
  layer ``l`` on ``[0, len(ops(l))]``; an op ``[k-1, k]`` goes to the referee
  (``kind = "op"``, ``op_spec`` naming op ``ops(l)[k - 1]``, ``update`` included) with the
  agreed input point ``k - 1``;
- every hash equal: the parties agree on every state of the step interval, so the disputed leaf
  differs in something else (its loss, norm, batch ids or rng counter): the referee rebuilds
  the leaf (``kind = "leaf"``).

**Claims.** A party's hashes are claims about canonical points; a later Bisect must repeat
every earlier claim of the same party at the same point (:func:`contradiction`): nobody can
move an endpoint it already committed to.

**Nothing to bisect.** A contested MISMATCH that names no replayed leaf to start from (no
``first_bad_leaf``: the leaves matched but the final theta or the delta did not; leaf 0; a
leaf a cheap check found outside every replayed window) goes to the referee at once
(:func:`verdict_case`, ``kind = "verdict"``): the referee audits the round again itself, and
the auditor loses if that audit is a MATCH, the miner otherwise.

**Ruling.** :func:`rule` is the referee's decision from its own honest values: a wrong agreed
input, or both parties wrong, and the miner loses (the dispute is the miner's claim that its
commitment is reproducible; a referee that reproduces neither side's value rejects it);
otherwise the party whose hash differs from the referee's loses.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Final, Literal

from attrs import frozen

__all__ = [
    "EMBED_OP",
    "OPS",
    "TAIL_OPS",
    "VERDICT_SPEC",
    "Level",
    "Party",
    "Point",
    "RefereeCase",
    "RefereeKind",
    "Ruling",
    "Stage",
    "advance",
    "canonical",
    "claims",
    "contradiction",
    "first_stage",
    "inputs_hash",
    "layer_ops",
    "op_spec",
    "points",
    "rule",
    "stage_points",
    "verdict_case",
]

EMBED_OP: Final = "embed"
OPS: Final = ("attn_norm", "attn", "attn_residual", "mlp_norm", "mlp", "mlp_residual")
TAIL_OPS: Final = ("final_norm", "head", "loss", "update")
ZERO32: Final = bytes(32)

Level = Literal["step", "layer", "op"]
Party = Literal["miner", "auditor"]
RefereeKind = Literal["op", "start", "leaf", "verdict"]


def layer_ops(n_layers: int, layer: int) -> tuple[str, ...]:
    """The ops of layer ``layer`` (``0 .. n_layers``; ``n_layers`` is the tail)."""
    if not 0 <= layer <= n_layers:
        raise ValueError(f"layer {layer} is outside 0..{n_layers}")
    if layer == n_layers:
        return TAIL_OPS
    return ((EMBED_OP,) if layer == 0 else ()) + OPS


@frozen(order=True)
class Point:
    """A canonical point: ``step`` (``t``), ``layer`` (``t``, ``index`` in ``0 .. n_layers``)
    or ``op`` (``t``, ``layer``, ``index`` strictly inside the layer's op span)."""

    level: Level
    t: int
    layer: int | None = None
    index: int | None = None

    def key(self) -> str:
        """A stable text key (the store's claim key, the view's label)."""
        if self.level == "step":
            return f"step={self.t}"
        if self.level == "layer":
            return f"step={self.t};point={self.index}"
        return f"step={self.t};layer={self.layer};point={self.index}"


def canonical(n_layers: int, level: Level, index: int, t: int, layer: int | None) -> Point:
    """The canonical point of ``index`` at ``level`` (module doc); ``t`` is the step of the
    layer and op levels, ``layer`` the op level's layer. ValueError when out of range."""
    if level == "step":
        return Point("step", index)
    if level == "layer":
        if not 0 <= index <= n_layers + 1:
            raise ValueError(f"layer point {index} is outside 0..{n_layers + 1}")
        if index == n_layers + 1:
            return Point("step", t)
        return Point("layer", t, None, index)
    assert layer is not None
    n_ops = len(layer_ops(n_layers, layer))
    if not 0 <= index <= n_ops:
        raise ValueError(f"op point {index} of layer {layer} is outside 0..{n_ops}")
    if index == 0:
        return canonical(n_layers, "layer", layer, t, None)
    if index == n_ops:
        return canonical(n_layers, "layer", layer + 1, t, None)
    return Point("op", t, layer, index)


@frozen
class Stage:
    """One bisection round (module doc)."""

    level: Level
    a: int
    b: int
    n: int
    t: int | None = None
    layer: int | None = None


def points(a: int, b: int, n: int) -> list[int]:
    """``p_j = a + ceil(j (b - a) / N)`` for ``j = 0 .. N`` (exact integer arithmetic)."""
    if not (a < b and 1 <= n <= b - a):
        raise ValueError(f"bad interval [{a}, {b}] with N = {n}")
    return [a + -(-(j * (b - a)) // n) for j in range(n + 1)]


def stage_points(n_layers: int, stage: Stage) -> list[Point]:
    """The canonical points of ``stage``'s ``N + 1`` hashes."""
    return [
        canonical(n_layers, stage.level, p, stage.t or 0, stage.layer)
        for p in points(stage.a, stage.b, stage.n)
    ]


@frozen
class RefereeCase:
    """What the referee decides (module doc). ``point`` is the disputed point (for ``leaf``:
    step point ``k*J``, with ``leaf = k``); ``agreed`` the agreed point just before it (None
    for ``start`` and ``leaf``); ``agreed_step`` the agreed state before the disputed step (op
    cases whose step interval was bisected; None when it was never claimed)."""

    kind: RefereeKind
    point: Point | None
    op_spec: str
    miner_hash: str | None
    auditor_hash: str | None
    agreed: Point | None = None
    agreed_hash: str | None = None
    agreed_step: str | None = None
    leaf: int | None = None


VERDICT_SPEC: Final = "verdict"


def verdict_case() -> RefereeCase:
    """The referee's case of a contest with nothing to bisect (module doc)."""
    return RefereeCase("verdict", None, VERDICT_SPEC, None, None)


def op_spec(n_layers: int, point: Point) -> str:
    """``"step=T;layer=L;op=NAME"`` of an op point (the op whose output the point is);
    ``"step=T"`` for a step point; a layer point is the output of the previous layer's last
    op, point 0 of step ``t`` is ``"step=T;layer=0;op=input"``."""
    if point.level == "step":
        return f"step={point.t}"
    if point.level == "layer":
        assert point.index is not None
        if point.index == 0:
            return f"step={point.t};layer=0;op=input"
        return f"step={point.t};layer={point.index - 1};op={OPS[-1]}"
    assert point.layer is not None
    assert point.index is not None
    name = layer_ops(n_layers, point.layer)[point.index - 1]
    return f"step={point.t};layer={point.layer};op={name}"


def _stage(level: Level, a: int, b: int, arity: int, **where: int) -> Stage:
    return Stage(level, a, b, min(arity, b - a), **where)


def _settle(n_layers: int, stage: Stage, a: int, b: int, arity: int) -> Stage | tuple[int, int]:
    """The stage after narrowing ``stage`` to ``[a, b]``; ``(t, layer)`` plus the op point
    when an op interval of length 1 is reached (the caller builds the referee case)."""
    if b - a > 1:
        return _stage(stage.level, a, b, arity, **_where(stage))
    if stage.level == "step":
        return _stage("layer", 0, n_layers + 1, arity, t=b)
    if stage.level == "layer":
        assert stage.t is not None
        return _stage("op", 0, len(layer_ops(n_layers, a)), arity, t=stage.t, layer=a)
    return (a, b)


def _where(stage: Stage) -> dict[str, int]:
    out = {}
    if stage.t is not None:
        out["t"] = stage.t
    if stage.layer is not None:
        out["layer"] = stage.layer
    return out


def first_stage(first_bad_leaf: int, J: int, n_layers: int, arity: int) -> Stage:  # noqa: N803
    """The first stage of a contested verdict: steps ``[(k-1) J, k J]`` (descending at once
    when ``J = 1``). ``first_bad_leaf`` must be ``>= 1`` (leaf 0 is the public start)."""
    if first_bad_leaf < 1 or J < 1 or n_layers < 1 or arity < 2:
        raise ValueError("a dispute needs first_bad_leaf >= 1, J >= 1, n_layers >= 1, arity >= 2")
    a, b = (first_bad_leaf - 1) * J, first_bad_leaf * J
    settled = _settle(n_layers, Stage("step", a, b, 1), a, b, arity)
    assert isinstance(settled, Stage)
    return settled


def claims(n_layers: int, stage: Stage, hashes: Sequence[str]) -> dict[Point, str]:
    """The claims a Bisect for ``stage`` makes (point -> hash)."""
    pts = stage_points(n_layers, stage)
    if len(hashes) != len(pts):
        raise ValueError(f"{len(hashes)} hashes for {len(pts)} points")
    return dict(zip(pts, hashes, strict=True))


def contradiction(
    earlier: Mapping[Point, str], now: Mapping[Point, str]
) -> tuple[Point, str, str] | None:
    """The first point (in order) where ``now`` contradicts ``earlier``: ``(point, earlier
    hash, new hash)``; None when consistent."""
    for point in sorted(set(earlier) & set(now)):
        if earlier[point] != now[point]:
            return point, earlier[point], now[point]
    return None


def advance(
    n_layers: int,
    stage: Stage,
    miner: Sequence[str],
    auditor: Sequence[str],
    arity: int,
    *,
    first_bad_leaf: int,
    agreed_step: str | None,
) -> Stage | RefereeCase:
    """The next stage, or the referee's case, from both parties' hashes (module doc).
    ``agreed_step`` is the agreed state before the step being bisected, when known."""
    pts = stage_points(n_layers, stage)
    if miner[0] != auditor[0]:
        return RefereeCase(
            "start", pts[0], op_spec(n_layers, pts[0]), miner[0], auditor[0], agreed_step=None
        )
    diff = [j for j in range(1, len(pts)) if miner[j] != auditor[j]]
    if not diff:  # the states agree: the leaf differs elsewhere (module doc)
        return RefereeCase(
            "leaf",
            pts[-1],
            f"leaf={first_bad_leaf}",
            None,
            None,
            leaf=first_bad_leaf,
        )
    j = diff[0]
    raw = points(stage.a, stage.b, stage.n)
    a, b = raw[j - 1], raw[j]
    settled = _settle(n_layers, stage, a, b, arity)
    if isinstance(settled, Stage):
        return settled
    point, agreed = pts[j], pts[j - 1]
    assert stage.t is not None
    assert stage.layer is not None
    name = layer_ops(n_layers, stage.layer)[b - 1]  # update's point is the step point: name it
    return RefereeCase(
        "op",
        point,
        f"step={stage.t};layer={stage.layer};op={name}",
        miner[j],
        auditor[j],
        agreed=agreed,
        agreed_hash=miner[j - 1],
        agreed_step=agreed_step,
    )


def inputs_hash(agreed_step: str | None, agreed: str | None) -> str:
    """``sha256(step_agreed || op_agreed)`` (spec 6.4), an unknown part as 32 zero bytes."""
    step = ZERO32 if agreed_step is None else bytes.fromhex(agreed_step)
    op = ZERO32 if agreed is None else bytes.fromhex(agreed)
    return hashlib.sha256(step + op).hexdigest()


@frozen
class Ruling:
    """The referee's decision: the losing party and why (for the log and the view)."""

    loser: Party
    reason: str


def rule(
    case: RefereeCase,
    *,
    true_point: str,
    true_agreed: str | None = None,
    true_agreed_step: str | None = None,
    committed_leaf: str | None = None,
) -> Ruling:
    """Decide ``case`` from the referee's own values (module doc). ``true_point`` is the
    referee's hash at ``case.point`` (for ``leaf``: its rebuilt digest of the leaf, compared
    with ``committed_leaf``, the miner's committed digest)."""
    if case.kind == "verdict" or case.point is None:
        raise ValueError("a verdict case is ruled by a new audit, not by a point's value")
    if case.kind == "leaf":
        if committed_leaf is None:
            raise ValueError("a leaf case needs the committed leaf digest")
        if true_point == committed_leaf:
            return Ruling("auditor", f"leaf {case.leaf} rebuilds to the miner's commitment")
        return Ruling("miner", f"leaf {case.leaf} does not rebuild to the miner's commitment")
    if case.agreed_step is not None and true_agreed_step != case.agreed_step:
        return Ruling("miner", "the agreed state before the step is not an honest replay's")
    if case.agreed_hash is not None and true_agreed != case.agreed_hash:
        return Ruling("miner", f"the agreed input of {case.op_spec} is not an honest replay's")
    miner_ok, auditor_ok = case.miner_hash == true_point, case.auditor_hash == true_point
    if miner_ok and not auditor_ok:
        return Ruling("auditor", f"the auditor's {case.op_spec} is not an honest replay's")
    if auditor_ok and not miner_ok:
        return Ruling("miner", f"the miner's {case.op_spec} is not an honest replay's")
    return Ruling("miner", f"neither party's {case.op_spec} is an honest replay's")
