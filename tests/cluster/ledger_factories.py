"""Running a scenario against JetStream ledger factories (each one a broker process's view of
the store) on one nats-server, for the JetStream managed-ledger tests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from starquake.cluster.js_factory import JetStreamLedgerFactory
from starquake.cluster.nodes import JetStreamNode

Make = Callable[..., Awaitable[JetStreamLedgerFactory]]
Scenario = Callable[[Make], Awaitable[None]]


def run(node: JetStreamNode, tmp_path: Path, scenario: Scenario) -> None:
    """Run ``scenario(make)``; ``make(**options)`` connects a factory (a broker process, with
    two ledger streams and no periodic cursor flush unless told) and every one made is
    closed at the end."""

    async def main() -> None:
        factories: list[JetStreamLedgerFactory] = []

        async def make(**options: Any) -> JetStreamLedgerFactory:
            options.setdefault("cursor_flush_seconds", 0)
            factory = await JetStreamLedgerFactory.connect(
                [node.url], tmp_path / f"f{uuid.uuid4().hex[:6]}", streams=2, **options
            )
            factories.append(factory)
            return factory

        try:
            await scenario(make)
        finally:
            for factory in factories:
                await factory.close()

    asyncio.run(main())
