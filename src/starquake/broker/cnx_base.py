"""What the command handlers of a connection share: state, writing, error replies."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starquake.broker.errors import BrokerServiceError
from starquake.protocol import commands

if TYPE_CHECKING:
    import asyncio

    from starquake.broker.consumer import Consumer
    from starquake.broker.producer import Producer
    from starquake.broker.service import BrokerService


class CnxBase:
    """State and helpers of :class:`~starquake.broker.connection.ServerCnx` used by handlers."""

    service: BrokerService
    transport: asyncio.Transport | None
    remote_address: str
    producers: dict[int, Producer]
    consumers: dict[int, Consumer]

    def write(self, frame: bytes) -> None:
        raise NotImplementedError

    def write_frames(self, frames: list[bytes]) -> None:
        raise NotImplementedError

    def _error(self, request_id: int, exc: BrokerServiceError) -> None:
        self.write(commands.error(request_id, exc.code, exc.message))
