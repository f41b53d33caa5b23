"""Connections to NATS JetStream and its key-value buckets, shared by the cluster's stores."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import nats
from nats.js.api import KeyValueConfig
from nats.js.errors import APIError, BucketNotFoundError

from starquake.storage import StorageError

log = logging.getLogger(__name__)


async def _log_error(exc: Exception) -> None:
    log.debug("JetStream connection: %s", exc)


async def open_bucket(
    servers: list[str], config: KeyValueConfig, give_up_after: float = 30
) -> tuple[Any, Any]:
    """Connect to ``servers`` and open the key-value bucket of ``config``, creating it if it
    does not exist: ``(connection, bucket)``. Retries while the servers start (a new cluster
    elects its leaders first); StorageError once ``give_up_after`` seconds passed. The
    connection reconnects by itself later, for as long as it lives."""
    deadline = time.monotonic() + give_up_after
    nc = None
    while True:
        try:
            if nc is None:
                nc = await asyncio.wait_for(
                    nats.connect(
                        servers=servers,
                        connect_timeout=2,
                        max_reconnect_attempts=-1,
                        error_cb=_log_error,
                    ),
                    max(0.1, deadline - time.monotonic()),
                )
            js = nc.jetstream(timeout=5)
            try:
                return nc, await js.key_value(config.bucket)
            except BucketNotFoundError:
                return nc, await js.create_key_value(config)
        except (OSError, TimeoutError, APIError, nats.errors.Error) as exc:
            if time.monotonic() > deadline:
                if nc is not None:
                    await nc.close()
                raise StorageError(f"JetStream at {servers} unavailable: {exc}") from None
            await asyncio.sleep(0.2)
