"""The round view's ``assignment`` is encoded once per miner and spliced into every later render
(issue 17 goal 6): the bytes are exactly those of unstructuring and encoding the items again,
on every page, and a render after an unrelated commit does not unstructure them again."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import trio.testing

from hypertrain.coordinator.flows import roundview
from hypertrain.coordinator.flows.compactjson import COMPACT_JSON, Encoded, encode_json
from hypertrain.coordinator.flows.pages import Page
from hypertrain.coordinator.flows.roundview import derive_assignment, round_facts, round_view
from hypertrain.protocol.converter import unstructure
from hypertrain.rounds.assignment import Assignment
from tests.coordinator.harness import Harness
from tests.coordinator.lifecycle_support import admin, open_runs
from tests.coordinator.miner_support import KEYS, at_assign

VALUES: list[Any] = [
    [],
    [{"a": [1, 2.5, None, True]}, 'é\u2028"\\', -0.0, 10**20],
    {"x": {"y": []}},
    {},
]


@pytest.mark.parametrize("value", VALUES)
def test_an_encoded_part_is_spliced_as_the_bytes_of_its_value(value: Any) -> None:
    view = {"before": 1, "part": value, "after": {"k": "v"}, "ü": math.pi}
    spliced = {**view, "part": Encoded(encode_json(value))}
    assert encode_json(spliced) == COMPACT_JSON.encode(view).encode()


def test_an_encoded_part_elsewhere_or_under_a_key_that_is_no_string_is_refused() -> None:
    with pytest.raises(TypeError):
        encode_json({"a": [Encoded(b"1")]})
    with pytest.raises(TypeError):
        encode_json({1: Encoded(b"1")})


async def _uncached(h: Harness, run_id: str, page: Page) -> bytes:
    """The round view as it was encoded before the assignment was kept encoded: its items
    unstructured and the whole view encoded at once."""
    facts = await h.ctx.db.read(round_facts, run_id, 0, page)
    view = round_view(facts, None)
    assignment = derive_assignment(facts)
    assert assignment is not None
    shown = {hotkey for hotkey, _, _ in facts.miners}
    view["assignment"] = [unstructure(a) for a in assignment if a.hotkey in shown]
    return COMPACT_JSON.encode(view).encode()


async def test_the_round_view_answers_the_bytes_of_encoding_its_assignment_again(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    unstructured: list[Any] = []

    def counted(value: Any) -> Any:
        if isinstance(value, Assignment):
            unstructured.append(value.hotkey)
        return unstructure(value)

    monkeypatch.setattr(roundview, "unstructure", counted)
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h)
        path = f"{flow.runs}/rounds/0"
        queries = [
            ({}, Page()),
            ({"limit": 1, "offset": 1}, Page(1, 1)),
            ({"full": 1}, Page(full=True)),
        ]
        for params, page in queries:
            r = await h.client.get(path, params=params)
            assert r.status_code == 200, r.text
            assert r.json()["assignment"]
            assert r.content == await _uncached(h, flow.run_id, page)
        assert sorted(set(unstructured)) == sorted(k.ss58 for k in KEYS[:2])
        assert len(unstructured) == 2  # each item encoded once, whatever the page

        # an unrelated commit: the view renders again, from the items kept encoded
        r = await admin(h, "PUT", f"/v1/admin/runs/{flow.run_id}/roster/{KEYS[2].ss58}", {})
        assert r.status_code == 200, r.text
        assert h.parts is not None
        before = h.parts.answers.statistics().renders
        r = await h.client.get(path)
        assert h.parts.answers.statistics().renders == before + 1
        assert r.content == await _uncached(h, flow.run_id, Page())
        assert len(unstructured) == 2
