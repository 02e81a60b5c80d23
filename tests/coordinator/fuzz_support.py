"""A request grammar for fuzzing the coordinator's edge (issue 18 items 1 and 6).

:class:`Grammar` turns a seed into requests over every method and path pair of an app
(:func:`routes_of` reads them from ``app.url_map``): each request is *valid-looking* (a
plausible body for the route with the right credentials), *mutated* (one leaf of such a body
replaced, a key dropped or added, the type changed) or *hostile* (the cases the edge must
refuse: 4,400-digit integers, ``1e999``, ``-0``, deep nesting, lone surrogates, bad UTF-8,
huge arrays within the body limit, out-of-range path integers, a huge ``X-HT-Exp``...), with
and without the admin, worker, internal and node credentials. :func:`check_answer` is the
judgement every answer must pass. Nothing here does I/O: the in-process test
(``test_fuzz.py``) and a run against a live daemon over a socket both feed the same requests
to their own client. :class:`Tally` counts what came back.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from urllib.parse import quote

import attrs
from werkzeug.routing import Map

MAX_SAFE = 2**53 - 1


@attrs.frozen
class Raw:
    """JSON text written as is (what ``json.dumps`` cannot or will not write)."""

    text: str


@attrs.frozen
class Route:
    """One method and path pair; ``params`` are ``(name, converter)`` in path order."""

    method: str
    rule: str
    endpoint: str
    params: tuple[tuple[str, str], ...]


@attrs.frozen
class Credentials:
    """What a request may present: tokens, the slug, and ids that exist on the server."""

    admin: str
    worker: str
    internal: str
    node_key: str
    slug: str
    run_id: str
    hotkey: str
    object_sha: str


@attrs.frozen
class FuzzRequest:
    method: str
    path: str
    """Percent-encoded path and query, as sent."""
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    kind: str
    """``valid``, ``mutated`` or ``hostile``."""
    endpoint: str
    credential: str
    """Which credential it presents (``none``, ``admin``, ``worker``, ...)."""


def routes_of(url_map: Map) -> list[Route]:
    """Every (method, rule) of ``url_map`` except HEAD, OPTIONS and Quart's static files."""
    routes = []
    for rule in url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        params = tuple((name, type(conv).__name__) for name, conv in rule._converters.items())
        for method in sorted(set(rule.methods or ()) - {"HEAD", "OPTIONS"}):
            routes.append(Route(method, rule.rule, rule.endpoint, params))
    return sorted(routes, key=lambda r: (r.rule, r.method))


def dump(value: object) -> str:
    """JSON text of ``value`` with :class:`Raw` pieces written as they are."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{dump(k)}:{dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(dump(v) for v in value) + "]"
    return json.dumps(value)  # ensure_ascii: a lone surrogate becomes the \ud800 escape


HEX = "0123456789abcdef"
HOSTILE_LEAVES: tuple[object, ...] = (
    Raw("1" * 4400),
    Raw("-" + "9" * 40),
    Raw(str(2**63)),
    Raw(str(MAX_SAFE + 1)),
    Raw("-0"),
    Raw("1e999"),
    Raw("-1e400"),
    Raw("0.5"),
    Raw("NaN"),
    Raw("[" * 80 + "]" * 80),
    -1,
    0,
    MAX_SAFE,
    True,
    None,
    "",
    "\ud800",
    "x\udfffy",
    "\x00\x1b[31m",
    "A" * 10_000,
    "ZZ" * 32,
    "AB" * 32,
    "ab" * 31,
    [],
    {},
    [1] * 5000,
    {"unknown": 1},
)
HOSTILE_SEGMENTS: tuple[str, ...] = (
    "9" * 40,
    str(2**63),
    str(MAX_SAFE + 1),
    "9" * 4400,
    "-1",
    "abc",
    "1.0",
    "0x10",
    "%00",
    "%ff%fe",
    "%ED%A0%80",
    "..",
    "%2e%2e",
    "A" * 3000,
    quote("\u00b2\u0661"),
    "ZZ" * 32,
    "AB" * 32,
)
HOSTILE_BODIES: tuple[bytes, ...] = (
    b"",
    b"null",
    b"[]",
    b"{",
    b'{"a": "\xff\xfe"}',
    b"\xc3\x28",
    b"\x00" * 64,
    b"[" * 100_000,
    b"{" + b'"a":{' * 70 + b"}" * 71,
    b"[" + b"1," * 200_000 + b"1]",
    b'{"a": NaN}',
    b'{"a": Infinity}',
    b'{"a": 1, "a": 2}',
    b'"\\ud800"',
    b'["\\udfff"]',
    b"1" * 4400,
    b"-0",
    b"1e999",
    b"[1e999, -0]",
)
QUERIES: tuple[str, ...] = (
    "d_open=" + "9" * 5000,
    "d_open=%C2%B2",
    "d_open=-1",
    "d_open=0",
    "epoch=" + "9" * 4400,
    "epoch=1&epoch_at=" + str(2**63),
    "epoch=%D9%A1",
    "kinds=%ff",
    "kinds=" + "x," * 500,
    "state=%00&party=" + "A" * 500,
    "referee=2",
    "lease=" + "z" * 5000,
    "a=%zz&&=&",
)


_CREDENTIAL_OF_PREFIX = (
    ("/v1/admin/", "admin"),
    ("/v1/aggregator/", "admin"),
    ("/v1/worker/", "worker"),
    ("/internal/", "internal"),
    ("/v1/compute/jobs/", "node"),
)


def _credential_of(route: Route) -> str:
    """The credential a well-behaved client of ``route`` presents."""
    return next((c for prefix, c in _CREDENTIAL_OF_PREFIX if route.rule.startswith(prefix)), "none")


def _u53(rng: random.Random) -> str:
    return str(rng.choice((0, 1, 2, 3, 5)))


class Grammar:
    """Fixed-seed requests over ``routes`` (module doc)."""

    def __init__(self, routes: Sequence[Route], creds: Credentials, seed: int) -> None:
        self.routes = list(routes)
        self.creds = creds
        self.rng = random.Random(seed)

    def requests(self, count: int, *, credentials: bool = True) -> Iterator[FuzzRequest]:
        """``count`` requests, cycling over the routes so each gets its share; without
        ``credentials`` none presents a valid token or node key."""
        for i in range(count):
            route = self.routes[i % len(self.routes)]
            yield self.request(route, credentials=credentials)

    def request(self, route: Route, *, credentials: bool = True) -> FuzzRequest:
        rng = self.rng
        kind = rng.choice(("valid", "mutated", "hostile", "hostile"))
        path = self._path(route, hostile=kind == "hostile" and rng.random() < 0.5)
        if rng.random() < 0.15:
            path += "?" + rng.choice(QUERIES)
        credential, headers = self._headers(route, credentials, valid=kind != "hostile")
        body = b""
        if route.method in ("POST", "PUT") or rng.random() < 0.05:
            body = self._body(route, kind)
        return FuzzRequest(
            route.method, path, tuple(headers), body, kind, route.endpoint, credential
        )

    # --- paths ---------------------------------------------------------------------------------

    def _segment(self, name: str, converter: str, hostile: bool) -> str:
        rng, creds = self.rng, self.creds
        if hostile and rng.random() < 0.6:
            return rng.choice(HOSTILE_SEGMENTS)
        if converter == "U53Converter":
            return _u53(rng)
        valid: dict[str, Callable[[], str]] = {
            "run_id": lambda: creds.run_id,
            "hotkey": lambda: creds.hotkey,
            "sha256": lambda: rng.choice((creds.object_sha, "cd" * 32)),
            "name": lambda: rng.choice(("model.safetensors", "MANIFEST.json", "trace.u16")),
            "filename": lambda: "x.js",
        }
        return valid.get(name, lambda: "".join(rng.choice(HEX) for _ in range(32)))()

    def _path(self, route: Route, *, hostile: bool) -> str:
        converters = dict(route.params)

        def fill(match: re.Match[str]) -> str:
            name = match.group(1)
            return self._segment(name, converters[name], hostile)

        return re.sub(r"<(?:[a-z0-9]+(?:\([^)]*\))?:)?([a-z_]+)>", fill, route.rule)

    # --- headers -------------------------------------------------------------------------------

    def _headers(
        self, route: Route, credentials: bool, *, valid: bool
    ) -> tuple[str, list[tuple[bytes, bytes]]]:
        rng, creds = self.rng, self.creds
        tokens = {
            "admin": creds.admin,
            "worker": creds.worker,
            "internal": creds.internal,
            "node": creds.node_key,
        }
        wrong: dict[str, bytes] = {
            "wrong": b"Bearer nope",
            "empty": b"Bearer ",
            "long": b"Bearer " + b"x" * 5000,
            "basic": b"Basic YWRtaW46YWRtaW4=",
            "binary": b"Bearer \xff\xfe\x00",
        }
        headers: list[tuple[bytes, bytes]] = []
        if not credentials:
            choice = rng.choice([*wrong, "none"])
        elif valid and rng.random() < 0.8:
            choice = _credential_of(route)
        else:
            choice = rng.choice([*tokens, *wrong, "none"])
        if choice in tokens:
            headers.append((b"authorization", f"Bearer {tokens[choice]}".encode()))
        elif choice in wrong:
            headers.append((b"authorization", wrong[choice]))
        if rng.random() < 0.5:
            slug = creds.slug if rng.random() < 0.7 else "other\x7f"
            headers.append((b"x-platform-challenge-slug", slug.encode("latin-1")))
        if route.endpoint == "objects.get" or rng.random() < 0.05:
            headers.extend(self._signed_headers())
        if rng.random() < 0.1:
            headers.append((b"x-ht-lease", rng.choice((b"lt_x", b"\xff" * 40, b"a" * 5000))))
        if rng.random() < 0.1:
            headers.append((b"content-type", rng.choice((b"text/plain", b"application/json;;"))))
        if rng.random() < 0.02:
            headers.append((b"x-padding", b"p" * 20_000))
        return choice, headers

    def _signed_headers(self) -> list[tuple[bytes, bytes]]:
        rng, creds = self.rng, self.creds
        values = {
            b"x-ht-run": rng.choice((creds.run_id, "ab" * 32, "nope")),
            b"x-ht-hotkey": rng.choice((creds.hotkey, "5" * 48, "")),
            b"x-ht-exp": rng.choice(("10", "9" * 4400, str(2**63), "0", "01", "-1", "\u0661")),
            b"x-ht-sig": rng.choice(("00" * 64, "zz" * 64, "0" * 127)),
        }
        chosen = [k for k in values if rng.random() < 0.8]
        return [(k, values[k].encode()) for k in chosen]

    # --- bodies --------------------------------------------------------------------------------

    def template(self, route: Route) -> object:
        """A plausible body for the route (right field names, plausible values)."""
        c, rng = self.creds, self.rng
        hex64 = "".join(rng.choice(HEX) for _ in range(64))
        envelope = {
            "v": "ht/1",
            "type": route.endpoint.rpartition(".")[2].capitalize(),
            "run_id": c.run_id,
            "body": {"w": 0, "hotkey": c.hotkey, "theta_hash": hex64},
            "signer": c.hotkey,
            "exp_drand": 1000,
            "sig": "00" * 64,
        }
        bodies: dict[str, object] = {
            "beacon.post": {"round": 4, "randomness": hex64, "signature": "00" * 48},
            "compute.register": {
                "key": None,
                "handle": "fuzz",
                "capabilities": ["delta-loss"],
                "hardware": "cpu",
            },
            "compute.lease": {"capabilities": ["delta-loss"], "hardware": "cpu", "wait_ms": 0},
            "compute.result": {
                "lease": "lt_x",
                "ok": True,
                "result": {"loss": "40a00000", "fingerprint": "ab" * 32, "wallMs": 1},
            },
            "compute.benchmark": {"run_id": c.run_id},
            "ledger.clawback": {"hotkey": c.hotkey, "units": 1},
            "runs.config": {"train_rounds": 10, "final_after_upload": 5},
            "datasets.put": {"manifest_sha256": c.object_sha},
            "runs.honeypot": {"commitment": hex64},
            "runs.honeypot_reveal": {"hotkey": c.hotkey, "mode": "noise", "salt": hex64},
            "runs.paused": {"paused": rng.random() < 0.5},
            "runs.roster_put": {},
            "runs.roster_delete": {},
            "miner.leaves": {"hotkey": c.hotkey, "w": 0, "leaves": []},
            "miner.uploads": {"hotkey": c.hotkey, "w": 0, "sha256": hex64, "size": 10},
            "miner.rerun": {"hotkey": c.hotkey, "w": 0},
            "objects.state": {"sha256": c.object_sha},
            "aggregator.tape": {"sha256": c.object_sha},
            "aggregator.rollback": {"w": 0, "excluded": []},
            "worker.lease": {"wait_ms": 0},
            "worker.heartbeat": {"lease": "lt_x"},
            "worker.complete": {"lease": "lt_x", "verdict": envelope},
            "worker.fail": {"lease": "lt_x", "reason": "crash"},
        }
        return bodies.get(route.endpoint, envelope)

    def _mutate(self, value: object, depth: int = 0) -> object:
        rng = self.rng
        if isinstance(value, dict) and value and depth < 4:
            key = rng.choice(list(value))
            out = dict(value)
            op = rng.random()
            if op < 0.15:
                del out[key]
            elif op < 0.3:
                out[rng.choice(("extra", "\ud800", "W", "x" * 300))] = 1
            else:
                out[key] = self._mutate(value[key], depth + 1)
            return out
        if isinstance(value, list) and value and depth < 4:
            index = rng.randrange(len(value))
            return [*value[:index], self._mutate(value[index], depth + 1), *value[index + 1 :]]
        return rng.choice(HOSTILE_LEAVES)

    def _body(self, route: Route, kind: str) -> bytes:
        rng = self.rng
        if route.endpoint in ("objects.upload", "objects.admin_put") and rng.random() < 0.6:
            return rng.choice((b"", b"x" * 10, bytes(range(256)) * 4))
        if kind == "valid":
            return dump(self.template(route)).encode()
        if kind == "mutated":
            return dump(self._mutate(self.template(route))).encode()
        if rng.random() < 0.5:
            return rng.choice(HOSTILE_BODIES)
        text = dump(self._mutate(self._mutate(self.template(route))))
        if rng.random() < 0.3:
            text = text[: rng.randrange(len(text) + 1)]  # truncated
        return text.encode("utf-8", "surrogatepass")


ALLOWED_503 = ("shutting down", "not configured", "not open", "is missing", "no ")
"""Phrases of the documented 503s (NotConfigured, shutting down)."""


def check_answer(request: FuzzRequest, status: int, content_type: str, body: bytes) -> str | None:
    """Why the answer breaks the edge's promises, or None: no 5xx except a documented 503,
    and every 4xx (and 503) is JSON ``{"detail": "<non-empty>"}``."""
    if status >= 500 and status != 503:
        return f"{status} {body[:200]!r}"
    if status < 400:
        return None
    if not content_type.startswith("application/json"):
        return f"{status} is not JSON ({content_type!r}): {body[:200]!r}"
    try:
        detail = json.loads(body).get("detail")
    except (ValueError, AttributeError):
        return f"{status} body is not a JSON object: {body[:200]!r}"
    if not isinstance(detail, str) or not detail:
        return f"{status} has no detail: {body[:200]!r}"
    if status == 503 and not any(p in detail for p in ALLOWED_503):
        return f"undocumented 503: {detail!r}"
    return None


@attrs.define
class Tally:
    """Statuses counted per kind, and the broken answers (at most ``keep``)."""

    statuses: Counter[int] = attrs.field(factory=Counter)
    by_kind: Counter[tuple[str, int]] = attrs.field(factory=Counter)
    failures: list[str] = attrs.field(factory=list)
    keep: int = 20

    def add(self, request: FuzzRequest, status: int, problem: str | None) -> None:
        self.statuses[status] += 1
        self.by_kind[(request.kind, status // 100 * 100)] += 1
        if problem is not None and len(self.failures) < self.keep:
            self.failures.append(
                f"{request.method} {request.path[:120]} [{request.kind}, {request.credential}]"
                f" -> {problem}"
            )

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    def summary(self) -> str:
        counts = ", ".join(f"{s}: {n}" for s, n in sorted(self.statuses.items()))
        return f"{self.total} requests; statuses {counts}"
