"""The subscription under a bulk reader: a non-durable, exclusive subscription from a start
position that hands out the entries as stored (not split into messages), with permits counted
in messages."""

from __future__ import annotations

import asyncio
import collections
import logging
import secrets

from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.consumer._deliveries import signed_64
from starquake.client.core._handler import ClientCore, HandlerBase
from starquake.client.exceptions import AlreadyClosed, NotConnected, PulsarException
from starquake.client.wire._connection import ClientConnection
from starquake.protocol import client_commands
from starquake.protocol.enums import InitialPosition, SubType
from starquake.protocol.wire import pb

log = logging.getLogger(CLIENT_LOGGER_NAME)
_U64 = 1 << 64

MAX_QUEUE_MESSAGES = 1_000_000
"""The most messages a byte-budgeted queue grants permits for."""


class EntryStream(HandlerBase):
    """A non-durable subscription handing out entries as stored, with message-count permits."""

    def __init__(
        self,
        core: ClientCore,
        topic: str,
        start: tuple[int, int, int],
        queue_size: int,
        subscription_prefix: str = "bulk-reader",
        consumer_name: str | None = None,
        max_queue_bytes: int = 0,
    ) -> None:
        super().__init__(core, topic)
        self.consumer_id = next(self._core.consumer_ids)
        self.subscription = f"{subscription_prefix}-{secrets.token_hex(6)}"
        self.consumer_name = consumer_name or self.subscription
        self._resume = (start[0], start[1])
        self._queue_size = max(queue_size, 0)
        self._min_queue = self._queue_size
        self._max_queue_bytes = max_queue_bytes if self._queue_size else 0
        self._seen_bytes = 0
        self._seen_messages = 0
        self._permits = 0
        self._entries: collections.deque[tuple[int, int, bytes]] = collections.deque()
        self._arrived = asyncio.Event()
        self._error: PulsarException | None = None

    def __repr__(self) -> str:
        return f"BulkReader({self.topic})"

    async def _register(self, cnx: ClientConnection) -> None:
        # Entries still queued from the last connection are read again from the resume
        # position: drop them now, before it is taken, or a read during the subscribe round
        # trip would take them and then get them a second time.
        self._entries.clear()
        rid = self._core.next_request_id()
        ledger, entry = self._resume
        start = pb.MessageIdData(ledgerId=ledger % _U64, entryId=entry % _U64)
        cmd = client_commands.subscribe(
            self.topic,
            self.subscription,
            SubType.Exclusive,
            self.consumer_id,
            rid,
            consumer_name=self.consumer_name,
            durable=False,
            initial_position=InitialPosition.Earliest,
            read_compacted=False,
            metadata={},
            start_message_id=start,
            key_shared_meta=None,
            replicate_subscription_state=False,
        )
        cnx.consumers[self.consumer_id] = self
        try:
            await cnx.request(cmd, rid, self._core.operation_timeout)
        except BaseException:
            cnx.consumers.pop(self.consumer_id, None)
            raise
        if self._closing:
            cnx.consumers.pop(self.consumer_id, None)
            return
        self._cnx = cnx
        self._permits = 0
        if self._queue_size:  # 0: a probe that reads nothing (last message id only)
            cnx.write_command(client_commands.flow(self.consumer_id, self._queue_size))

    def on_message(self, command: pb.CommandMessage, entry: bytes) -> None:
        mid = command.message_id
        self._entries.append((signed_64(mid.ledgerId), signed_64(mid.entryId), entry))
        self._arrived.set()

    def on_active_consumer_change(self, is_active: bool) -> None:
        """Exclusive subscription of our own: always active."""

    def on_reached_end_of_topic(self) -> None:
        """A terminated topic simply has no more entries."""

    def _fail(self, exc: PulsarException) -> None:
        self._error = exc
        self._arrived.set()

    async def take(self, wait: float) -> tuple[int, int, bytes] | None:
        """The next entry, or None if none arrives within ``wait`` seconds."""
        while not self._entries:
            if self._error is not None:
                raise self._error
            if self._closing:
                raise AlreadyClosed("the bulk reader is closed")
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), wait)
            except TimeoutError:
                return None
        item = self._entries.popleft()
        self._resume = (item[0], item[1] + 1)
        return item

    def release(self, messages: int, size: int = 0) -> None:
        """The caller is done with an entry of ``size`` bytes holding ``messages`` messages:
        grant permits back. With a byte budget (``max_queue_bytes``) the queue is resized to
        what the budget holds at the mean message size seen so far (never below the
        ``queue_size`` asked for, at most :data:`MAX_QUEUE_MESSAGES`): permits count messages,
        so small messages would otherwise leave the broker waiting on each permit round trip."""
        self._permits += messages
        if self._max_queue_bytes and messages > 0 and size > 0:
            self._seen_bytes += size
            self._seen_messages += messages
            fits = self._max_queue_bytes * self._seen_messages // self._seen_bytes
            want = max(self._min_queue, min(fits, MAX_QUEUE_MESSAGES))
            self._permits += want - self._queue_size  # fewer than none: hold permits back
            self._queue_size = want
        cnx = self._cnx
        if self._permits >= max(1, self._queue_size // 2) and cnx is not None and cnx.is_open:
            cnx.write_command(client_commands.flow(self.consumer_id, self._permits))
            self._permits = 0

    async def get_last_message_id(self) -> pb.MessageIdData:
        cnx = self._cnx
        if cnx is None or not cnx.is_open:
            raise NotConnected(f"{self.topic}: not connected")
        rid = self._core.next_request_id()
        resp = await cnx.request(
            client_commands.get_last_message_id(self.consumer_id, rid),
            rid,
            self._core.operation_timeout,
        )
        return resp.get_last_message_id_response.last_message_id

    async def close(self) -> None:
        self._stop_reconnecting()
        self._core.handlers.discard(self)
        cnx, self._cnx = self._cnx, None
        if cnx is not None and cnx.is_open:
            cnx.consumers.pop(self.consumer_id, None)
            rid = self._core.next_request_id()
            try:
                await cnx.request(
                    client_commands.close_consumer(self.consumer_id, rid),
                    rid,
                    self._core.operation_timeout,
                )
            except (PulsarException, OSError) as exc:
                log.debug("%r: close: %s", self, exc)
        self._arrived.set()
