"""open_disconnect_watch: a held ASGI request learns that its client has gone."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from nurseries import open_disconnect_watch


class _Client:
    """An ASGI ``receive`` backed by a memory channel, as hypercorn's is."""

    def __init__(self) -> None:
        self.send, self.receive_channel = trio.open_memory_channel[dict[str, Any]](10)

    async def receive(self) -> dict[str, Any]:
        return await self.receive_channel.receive()

    def leave(self) -> None:
        self.send.send_nowait({"type": "http.disconnect"})


async def test_a_wait_in_the_block_is_cancelled_when_the_client_goes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client = _Client()
    async with open_disconnect_watch(client.receive) as watch:
        with watch.cancelled_on_disconnect() as scope:
            assert not watch.gone
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep_forever)
                await trio.sleep(2.0)
                client.leave()
        assert scope.cancelled_caught
        assert watch.gone
        with watch.cancelled_on_disconnect() as again:  # gone already: cancelled at once
            await trio.sleep(1.0)
        assert again.cancelled_caught
    assert trio.current_time() == 2.0


async def test_a_disconnect_handed_over_just_before_the_block_ends_is_seen() -> None:
    """The disconnect reaches the channel with no checkpoint between it and the block's end:
    the watch, cancelled as the block ends, still takes it."""
    client = _Client()
    async with open_disconnect_watch(client.receive) as watch:
        await trio.testing.wait_all_tasks_blocked()  # the watch waits in receive
        client.leave()
    assert watch.gone


async def test_the_blocks_exception_comes_out_as_it_is() -> None:
    client = _Client()
    with pytest.raises(KeyError):
        async with open_disconnect_watch(client.receive):
            raise KeyError("x")
