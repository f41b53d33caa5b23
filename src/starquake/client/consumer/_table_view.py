"""Table views: the latest value of every key of a topic, kept up to date in memory.

A :class:`TableViewCore` reads all partitions of a topic from the earliest message with
compacted, non-durable readers. A message with a key sets the key's value, one with an empty
payload removes the key, and messages without a key are skipped. Opening returns once the
view holds everything the topic held at that moment; a task then follows the topic and tells
the listeners about every update (deletions included, with an empty value).

Every change of the map and every listener registration holds :attr:`TableViewCore.lock`, so
another thread (the blocking API's) can read a consistent snapshot and register a listener
without missing or repeating an update.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
from collections.abc import Callable
from typing import Any

from starquake.client.base._config import ConsumerConfig
from starquake.client.base._enums import ConsumerType
from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.base._message import Message, MessageId
from starquake.client.consumer._multi import ConsumerFront
from starquake.client.core._handler import ClientCore
from starquake.client.exceptions import ConsumerNotInitialized, PulsarException

__all__ = ["RawListener", "TableView", "TableViewCore", "describe_table_view", "open_table_view"]

log = logging.getLogger(CLIENT_LOGGER_NAME)

# Called on the event loop with the key and the raw value (b"" for a deletion).
RawListener = Callable[[str, bytes], None]


class TableViewCore:
    """(Loop) The readers, the map of raw values and the listeners of one table view."""

    def __init__(self, core: ClientCore, front: ConsumerFront) -> None:
        self._core = core
        self._front = front
        self.lock = threading.RLock()
        self._data: dict[str, bytes] = {}
        self._listeners: list[RawListener] = []
        self._close_hooks: list[Callable[[], None]] = []
        self._follower: asyncio.Task[None] | None = None
        self._closed = False

    async def start(self) -> None:
        """Open the readers, read up to the messages there are now, then follow the topic."""
        try:
            await self._front.start()
            await self._catch_up()
        except BaseException:
            await self._front.close()
            raise
        self._core.handlers.add(self)
        self._follower = asyncio.get_running_loop().create_task(self._follow())

    async def _catch_up(self) -> None:
        consumers = list(self._front.consumers.values())
        lasts = await asyncio.gather(*(c.get_last_message_id() for c in consumers))
        pending = [
            (consumer, last)
            for consumer, last in zip(consumers, lasts, strict=True)
            if last.entry_id() >= 0
        ]
        while pending:
            self._apply(await self._front.receive())
            pending = [(c, last) for c, last in pending if not _reached(c.last_dequeued, last)]

    async def _follow(self) -> None:
        while True:
            try:
                msg = await self._front.receive()
            except PulsarException as exc:  # the readers were closed
                log.debug("table view on %s stops: %s", self._front.topic, exc)
                return
            self._apply(msg)

    def _apply(self, msg: Message) -> None:
        key = msg.partition_key()
        if not key:
            return
        value = msg.data()
        with self.lock:
            if value:
                self._data[key] = value
            else:
                self._data.pop(key, None)
            listeners = list(self._listeners)
            for listener in listeners:
                try:
                    listener(key, value)
                except Exception:
                    log.exception("table view listener raised")

    # --- reading ----------------------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        """The raw value of ``key``, or None."""
        with self.lock:
            return self._data.get(key)

    def snapshot(self) -> list[tuple[str, bytes]]:
        """Every (key, raw value), at one moment."""
        with self.lock:
            return list(self._data.items())

    def snapshot_and_listen(self, listener: RawListener) -> list[tuple[str, bytes]]:
        """:meth:`snapshot`, and ``listener`` hears of every later update (atomically)."""
        with self.lock:
            self._listeners.append(listener)
            return list(self._data.items())

    def __len__(self) -> int:
        with self.lock:
            return len(self._data)

    # --- close ------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def on_close(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` (on the loop) once the view is closed, by itself or with the client."""
        self._close_hooks.append(hook)

    async def close(self) -> None:
        """Stop following the topic and close the readers (quietly if already closed)."""
        if self._closed:
            return
        self._closed = True
        self._core.handlers.discard(self)
        if self._follower is not None:
            self._follower.cancel()
        await self._front.close()
        for hook in self._close_hooks:
            hook()


def _reached(dequeued: MessageId | None, last: MessageId) -> bool:
    return dequeued is not None and not last > dequeued


async def open_table_view(
    core: ClientCore, topic: str, subscription_name: str | None, schema: Any
) -> TableViewCore:
    """Open a :class:`TableViewCore` on ``topic`` (all its partitions) and wait until it
    holds what the topic holds now."""
    config = ConsumerConfig(
        consumer_type=ConsumerType.Exclusive,
        is_read_compacted=True,
        durable=False,
        schema=schema,
    )
    subscription = subscription_name or f"table-view-{secrets.token_hex(5)}"
    front = ConsumerFront(core, [topic], subscription, config, start_message_id=MessageId.earliest)
    view = TableViewCore(core, front)
    await view.start()
    return view


class TableView:
    """An asyncio table view; create it with
    :meth:`starquake.client.asyncio.Client.create_table_view`.

    The map is in memory: :meth:`get`, :meth:`for_each`, :meth:`for_each_and_listen` and
    ``len()`` are plain (non-async) calls. Values are decoded with the view's schema.
    """

    def __init__(
        self, view: TableViewCore, topic: str, subscription: str | None, schema: Any
    ) -> None:
        self._view = view
        self._topic = topic
        self._subscription = subscription
        self._schema = schema
        self._closed = False

    @property
    def view(self) -> TableViewCore:
        """The implementation object (for the blocking wrapper)."""
        return self._view

    @property
    def schema(self) -> Any:
        """The schema that decodes the values."""
        return self._schema

    def _decode(self, raw: bytes) -> Any:
        return self._schema.decode(raw)

    def get(self, key: str) -> Any | None:
        """The value of ``key``, or None if the view has no such key."""
        raw = self._view.get(key)
        return None if raw is None else self._decode(raw)

    def for_each(self, callback: Callable[[str, Any], None]) -> None:
        """Call ``callback(key, value)`` for every entry."""
        for key, raw in self._view.snapshot():
            callback(key, self._decode(raw))

    def for_each_and_listen(self, callback: Callable[[str, Any], None]) -> None:
        """:meth:`for_each`, then call ``callback`` for every later update too (a deletion
        with the value an empty payload decodes to). Later calls run on the event loop."""
        entries = self._view.snapshot_and_listen(lambda k, v: callback(k, self._decode(v)))
        for key, raw in entries:
            callback(key, self._decode(raw))

    async def close(self) -> None:
        """Stop following the topic (the entries stay readable). Raises
        ConsumerNotInitialized if closed before (quiet after the client's close), as the
        official client does."""
        if self._closed:
            raise ConsumerNotInitialized("the table view is already closed")
        self._closed = True
        await self._view.close()

    def __len__(self) -> int:
        return len(self._view)

    def __str__(self) -> str:
        return describe_table_view(self._topic, self._subscription)

    def __repr__(self) -> str:
        return self.__str__()


def describe_table_view(topic: str, subscription: str | None) -> str:
    """How a table view prints, as the official client's does."""
    if subscription is None:
        return f"TableView(topic={topic})"
    return f"TableView(topic={topic}, subscription={subscription})"
