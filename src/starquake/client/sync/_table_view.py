"""The blocking API's table view: the asyncio core's map, read from any thread."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.consumer._table_view import TableViewCore, describe_table_view
from starquake.client.exceptions import ConsumerNotInitialized
from starquake.client.sync._loop import LoopThread

__all__ = ["TableView"]

log = logging.getLogger(CLIENT_LOGGER_NAME)

Callback = Callable[[str, Any], None]
# (callback, key, raw value) for the listener thread; None stops it.
_Event = tuple[Callback, str, bytes] | None


class TableView:
    """A view of the latest value of every key of a topic (``pulsar.TableView``); create it
    with :meth:`starquake.client.Client.create_table_view`.

    Values are decoded with the view's schema. The callbacks of :meth:`for_each_and_listen`
    run on a thread of the view for the updates after the call, one at a time, in order.
    """

    def __init__(
        self,
        runner: LoopThread,
        view: TableViewCore,
        topic: str,
        subscription: str | None,
        schema: Any,
    ) -> None:
        self._runner = runner
        self._view = view
        self._topic = topic
        self._subscription = subscription
        self._schema = schema
        # Held while a callback runs: updates wait for the caller's pass over the entries.
        self._dispatching = threading.RLock()
        self._events: queue.SimpleQueue[_Event] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        view.on_close(lambda: self._events.put(None))

    def get(self, key: str) -> Any | None:
        """The value associated with ``key``, or None if the view has no such key."""
        raw = self._view.get(key)
        return None if raw is None else self._schema.decode(raw)

    def for_each(self, callback: Callback) -> None:
        """Call ``callback(key, value)`` for every entry of the view."""
        for key, raw in self._view.snapshot():
            callback(key, self._schema.decode(raw))

    def for_each_and_listen(self, callback: Callback) -> None:
        """Call ``callback(key, value)`` for every entry, then for every later update (a
        deletion with the value an empty payload decodes to)."""
        with self._dispatching:
            if self._thread is None and not self._view.closed:
                self._thread = threading.Thread(
                    target=self._dispatch, name="starquake-table-view", daemon=True
                )
                self._thread.start()
            entries = self._view.snapshot_and_listen(
                lambda key, raw: self._events.put((callback, key, raw))
            )
            for key, raw in entries:
                callback(key, self._schema.decode(raw))

    def _dispatch(self) -> None:
        while True:
            event = self._events.get()
            if event is None:
                return
            callback, key, raw = event
            with self._dispatching:
                try:
                    callback(key, self._schema.decode(raw))
                except Exception:
                    log.exception("table view listener raised")

    def close(self) -> None:
        """Stop following the topic (the entries stay readable). Raises
        ConsumerNotInitialized if closed before (quiet after the client's close), as the
        official client does."""
        if self._closed:
            raise ConsumerNotInitialized("the table view is already closed")
        self._closed = True
        if not self._view.closed:
            self._runner.run(self._view.close())

    def __len__(self) -> int:
        """The number of entries."""
        return len(self._view)

    def __str__(self) -> str:
        return describe_table_view(self._topic, self._subscription)

    def __repr__(self) -> str:
        return self.__str__()
