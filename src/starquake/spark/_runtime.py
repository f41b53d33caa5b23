"""Running the asyncio client from Spark's synchronous Python code.

A :class:`Session` owns one event loop (kept between calls, so connections and readers live
across them) and one asyncio ``Client``. Spark runs the data source's methods in plain
Python processes, one call at a time, so nothing else runs on that loop meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from starquake.client.asyncio import Client

T = TypeVar("T")


class Session:
    """An event loop plus a client for ``service_url`` (created on first use)."""

    def __init__(self, service_url: str, client_args: Mapping[str, Any]) -> None:
        self._service_url = service_url
        self._client_args = dict(client_args)
        # A plain loop, not asyncio.Runner: the Runner re-installs its SIGINT handler around
        # every call from the main thread, which (in Python 3.11) formats the previous result
        # into text: megabytes per call when results are column batches.
        self._loop = asyncio.new_event_loop()
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self._service_url, **self._client_args)
        return self._client

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to completion on the session's loop."""
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        """Close the client and the loop (errors while closing are not the caller's concern)."""
        try:
            if self._client is not None:
                self.run(self._client.close())
        except Exception:  # closing after a failure: the original error matters more
            pass
        finally:
            self._client = None
            self._loop.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
