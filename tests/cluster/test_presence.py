"""Presence against a real nats-server: a broker whose subscription is gone (its connection
closed) is counted gone after two "no responders" answers; a live one never is; a verdict of
gone is asked again later, so a broker whose connection came back counts as alive again."""

from __future__ import annotations

import asyncio

import nats
import pytest

from starquake.cluster import presence
from starquake.cluster.nodes import JetStreamNode
from starquake.cluster.presence import BrokerPresence
from starquake.cluster.registry import BrokerInfo


def _info(n: int) -> BrokerInfo:
    return BrokerInfo(broker_id=f"127.0.0.1:{9000 + n}", broker_url=f"pulsar://127.0.0.1:{n}")


def test_gone_alive_and_back(
    jetstream_node: JetStreamNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(presence, "GONE_FOR", 0.5)
    monkeypatch.setattr(presence, "ALIVE_FOR", 0.0)

    async def scenario() -> None:
        asker_nc = await nats.connect(jetstream_node.url)
        other_nc = await nats.connect(jetstream_node.url)
        me, other = _info(1), _info(2)
        asker = BrokerPresence(asker_nc, me)
        answering = BrokerPresence(other_nc, other)
        try:
            assert await asker.gone(me) is False  # never itself
            assert await asker.gone(other) is True  # nobody answers for it yet
            await answering.start()
            assert await asker.gone(other) is True  # the verdict holds for GONE_FOR
            await asyncio.sleep(0.6)
            assert await asker.gone(other) is False  # asked again: it answers
            await other_nc.close()  # as a killed process's connection closes
            # the server drops the subscription a moment later; until then a request
            # waits for an answer that never comes, which says nothing
            for _ in range(20):
                if await asker.gone(other):
                    break
            else:
                raise AssertionError("a closed connection's broker never counted gone")
            stranger = _info(3)
            assert await asker.gone(stranger) is True
        finally:
            await asker_nc.close()
            if not other_nc.is_closed:
                await other_nc.close()

    asyncio.run(scenario())
