"""Metadata writes off the event loop: the store fsyncs, so keys are written from a worker
thread, one batch at a time, in the background."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from starquake.storage import MetadataStore

log = logging.getLogger("starquake.broker.service")


class MetadataWriter:
    """Writes metadata keys in the background; a newer value of a key replaces one not yet
    written, so an older value never overwrites a newer one. A failed write is retried (every
    second) until :meth:`stop`."""

    def __init__(self, store: MetadataStore, background: set[asyncio.Task[Any]]) -> None:
        """``background``: the set of the broker's background tasks (the writer joins it)."""
        self._store = store
        self._background = background
        self._pending: dict[str, tuple[bytes | None, list[Callable[[], None]]]] = {}
        self._writer: asyncio.Task[None] | None = None
        self._stopping = False

    def store_later(
        self, key: str, value: bytes | None, on_stored: Callable[[], None] | None = None
    ) -> None:
        """Write (None: delete) ``key``, then call ``on_stored``."""
        previous = self._pending.get(key)
        callbacks = previous[1] if previous is not None else []
        if on_stored is not None:
            callbacks.append(on_stored)
        self._pending[key] = (value, callbacks)
        if self._writer is None or self._writer.done():
            task = asyncio.get_running_loop().create_task(self._write())
            self._writer = task
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def stop(self) -> None:
        """Wait for the writes under way; a failure from now on is logged, not retried."""
        self._stopping = True
        writer = self._writer
        if writer is not None:
            with contextlib.suppress(Exception):
                await writer

    async def _write(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, {}
            try:
                await asyncio.to_thread(
                    self._store.put_many, [(k, v) for k, (v, _) in batch.items()]
                )
            except Exception:
                if self._stopping:
                    log.exception("storing %d metadata key(s) failed at shutdown", len(batch))
                    return
                log.exception("storing %d metadata key(s) failed; retrying", len(batch))
                for key, pending in batch.items():
                    self._pending.setdefault(key, pending)
                await asyncio.sleep(1.0)
                continue
            for _, callbacks in batch.values():
                for callback in callbacks:
                    callback()
