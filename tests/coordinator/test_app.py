"""``create_app`` adds routes and nothing else: no side effects on the coordinator."""

from __future__ import annotations

from pathlib import Path

from hypertrain.coordinator.web.app import AppParts, create_app
from hypertrain.coordinator.web.objects import UploadAwareRequest
from nurseries.testing import open_mounted_client
from tests.coordinator.harness import API, open_harness


async def test_a_second_app_over_one_context_changes_nothing_and_serves_the_same_state(
    tmp_path: Path,
) -> None:
    async with open_harness(tmp_path) as h:
        observers = list(h.ctx.beacon_observers)
        hub = h.ctx.compute
        second = create_app(h.ctx, AppParts.build(h.ctx))
        third = create_app(h.ctx, AppParts.build(h.ctx))
        assert h.ctx.beacon_observers == observers
        assert h.ctx.compute is hub
        assert second.request_class is third.request_class is UploadAwareRequest
        assert sorted(r.rule for r in second.url_map.iter_rules()) == sorted(
            r.rule for r in third.url_map.iter_rules()
        )

        assert (await h.post_round(h.round(1))).status_code == 200
        async with open_mounted_client({API: second}, base_url=API) as client:
            latest = (await client.get("/v1/beacon/latest")).json()
        assert latest["round"] == 1
