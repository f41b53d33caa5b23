"""Ending a transaction on a partition or subscription another broker of the cluster serves.

As Pulsar's coordinator does, the broker of the coordinator looks up the topic's owner and
sends it END_TXN_ON_PARTITION or END_TXN_ON_SUBSCRIPTION over the binary protocol. An answer
ServiceNotReady (the topic moved, or is loading), a lost connection or no answer means: look
the topic up again and resend, with a growing pause, until the owner answers or
:data:`GIVE_UP_SECONDS` pass (the coordinator then drives the end again later). Ending a
transaction twice on a topic does nothing, so a resend is harmless. Any other error in the
answer is a refusal (:class:`EndRefusedError`, with the owner's error code), not resent.

The connections are those of the broker's own client (:mod:`starquake.broker.broker_client`):
with ``brokerClientAuthenticationPlugin`` they present its credentials, which the owner
checks to be a super user's when authentication and authorization are on.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable

from starquake.broker.errors import ServiceNotReadyError
from starquake.broker.transactions.errors import EndRefusedError, TxnId, txn_text
from starquake.client.base._config import ClientConfig
from starquake.client.exceptions import PulsarException, ServiceUnitNotReady
from starquake.client.wire._pool import ConnectionPool
from starquake.common.topic_name import TopicName
from starquake.protocol import txn_commands
from starquake.protocol.errors import ServerError
from starquake.protocol.wire import pb

log = logging.getLogger(__name__)

GIVE_UP_SECONDS = 30.0
REQUEST_SECONDS = 10.0
FIRST_PAUSE = 0.1
MAX_PAUSE = 1.0

OwnerOf = Callable[[TopicName], Awaitable[str | None]]
"""The binary URL of the broker serving a topic (None: this broker), taking it if due."""
LocalEnd = Callable[[], Awaitable[None]]


class RemoteEnds:
    """Sends the ends of transactions to the brokers serving their topics."""

    def __init__(self, owner_of: OwnerOf, client: ClientConfig) -> None:
        """``client``: the settings of the connections to the other brokers."""
        self._owner_of = owner_of
        self._pool = ConnectionPool(client)
        self._ids = itertools.count(1)

    async def end_on_partition(self, topic: str, txn: TxnId, commit: bool, local: LocalEnd) -> None:
        """End ``txn`` on ``topic`` (``local`` when this broker serves it)."""
        action = txn_commands.COMMIT if commit else txn_commands.ABORT

        def command(request_id: int) -> pb.BaseCommand:
            return txn_commands.end_txn_on_partition(request_id, *txn, topic, action)

        await self._end(topic, txn, command, local)

    async def end_on_subscription(
        self, topic: str, subscription: str, txn: TxnId, commit: bool, local: LocalEnd
    ) -> None:
        """End ``txn`` on ``subscription`` of ``topic``."""
        action = txn_commands.COMMIT if commit else txn_commands.ABORT

        def command(request_id: int) -> pb.BaseCommand:
            return txn_commands.end_txn_on_subscription(
                request_id, *txn, topic, subscription, action
            )

        await self._end(topic, txn, command, local)

    async def _end(
        self,
        topic: str,
        txn: TxnId,
        command: Callable[[int], pb.BaseCommand],
        local: LocalEnd,
    ) -> None:
        deadline = time.monotonic() + GIVE_UP_SECONDS
        pause = FIRST_PAUSE
        name = TopicName.parse(topic)
        while True:
            try:
                await self._attempt(name, command, local)
                return
            except (ServiceNotReadyError, ServiceUnitNotReady, OSError, TimeoutError) as exc:
                failure: Exception = exc
            except PulsarException as exc:  # connection lost, timeout: ask the owner again
                failure = exc
            if time.monotonic() + pause > deadline:
                raise ServiceNotReadyError(
                    f"Transaction {txn_text(txn)} not ended on {topic}: {failure}"
                )
            log.debug("ending %s on %s: %s; retrying", txn_text(txn), topic, failure)
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_PAUSE)

    async def _attempt(
        self, topic: TopicName, command: Callable[[int], pb.BaseCommand], local: LocalEnd
    ) -> None:
        url = await self._owner_of(topic)
        if url is None:
            await local()
            return
        cnx = await self._pool.get_connection(url)
        request_id = next(self._ids)
        reply = await cnx.request(command(request_id), request_id, REQUEST_SECONDS)
        body = (
            reply.end_txn_on_partition_response
            if reply.type == pb.BaseCommand.END_TXN_ON_PARTITION_RESPONSE
            else reply.end_txn_on_subscription_response
        )
        if body.HasField("error"):
            if body.error == pb.ServiceNotReady:
                raise ServiceUnitNotReady(body.message)
            raise EndRefusedError(f"{url} refused the end: {body.message}", _code(body.error))

    async def close(self) -> None:
        """Close the connections to the other brokers."""
        await self._pool.close()


def _code(error: int) -> ServerError:
    try:
        return ServerError(error)
    except ValueError:
        return ServerError.UnknownError
