"""Connections to NATS JetStream and its key-value buckets, shared by the cluster's stores."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, NamedTuple, TypeVar

import nats
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, KeyValueConfig, StreamConfig
from nats.js.errors import APIError, NotFoundError

from starquake.common.redact import redact_url
from starquake.storage import StorageError

log = logging.getLogger(__name__)

T = TypeVar("T")

# What a JetStream call raises when the servers refuse or do not answer
NATS_ERRORS = (OSError, TimeoutError, APIError, nats.errors.Error)
# JetStream's error codes for a write whose expected last sequence was not the last one
WRONG_LAST_SEQUENCE = (10071, 10164)


@contextlib.contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """Report a JetStream call's failure (refused, or no answer) as a StorageError naming
    ``what``; errors the caller handles are caught inside, before this."""
    try:
        yield
    except NATS_ERRORS as exc:
        raise StorageError(f"{what}: {exc!r}") from None


# The longest a JetStream request made in this context waits for its answer (None: the
# context's own timeout); see requests_capped
_REQUEST_CAP: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "starquake_jetstream_request_cap", default=None
)


@contextlib.contextmanager
def requests_capped(seconds: float | None) -> Iterator[None]:
    """JetStream requests made inside (and in tasks started inside) wait at most ``seconds``
    (None: no cap) for their answer, whatever their context's timeout: for a retry loop,
    whose attempt begun while a stream elects its leader would otherwise wait out the whole
    timeout after the election (a request to a stream without a leader is never answered)."""
    token = _REQUEST_CAP.set(seconds)
    try:
        yield
    finally:
        _REQUEST_CAP.reset(token)


def request_timeout(normal: float) -> float:
    """``normal``, or the cap of :func:`requests_capped` where that is shorter."""
    cap = _REQUEST_CAP.get()
    return normal if cap is None else min(normal, cap)


class _CappedContext(JetStreamContext):
    """A JetStream context whose requests (its own, its managers' and its key-value
    buckets') honour :func:`requests_capped`: they all read the timeout from ``_timeout``."""

    @property
    def _timeout(self) -> float:
        return request_timeout(self._normal_timeout)

    @_timeout.setter
    def _timeout(self, value: float) -> None:
        self._normal_timeout = value


def jetstream_context(nc: Any, timeout: float) -> Any:
    """A JetStream context on ``nc`` whose requests wait ``timeout`` seconds for an answer
    (less inside :func:`requests_capped`)."""
    return _CappedContext(nc, timeout=timeout)


async def _log_error(exc: Exception) -> None:
    log.debug("JetStream connection: %s", exc)


async def until_ready(deadline: float, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
    """``attempt()`` again and again while JetStream is not ready (a new cluster elects its
    leaders first); StorageError naming ``what`` once ``deadline`` (monotonic) passed."""
    while True:
        try:
            return await attempt()
        except NATS_ERRORS as exc:
            if time.monotonic() > deadline:
                raise StorageError(f"{what}: {exc!r}") from None
            await asyncio.sleep(0.2)


class ConnectionLoss:
    """Tells the calls in flight on a connection that it dropped: their answers will never
    come (a request's reply goes to the connection it was sent on), so they need not wait for
    their timeout. Give :meth:`disconnected` and :meth:`reconnected` to :func:`connect`."""

    def __init__(self) -> None:
        self._lost: asyncio.Future[None] | None = None

    def current(self) -> asyncio.Future[None]:
        """Done once the connection as it is now drops (already done while disconnected)."""
        if self._lost is None:
            self._lost = asyncio.get_running_loop().create_future()
        return self._lost

    async def disconnected(self) -> None:
        lost = self.current()
        if not lost.done():
            lost.set_result(None)

    async def reconnected(self) -> None:
        self._lost = None

    async def call(self, what: str, request: Awaitable[T]) -> T:
        """``request``'s answer; StorageError naming ``what`` when the connection is down or
        drops before the answer (the request may or may not have been carried out)."""
        lost = self.current()
        call = asyncio.ensure_future(request)
        if lost.done():
            call.cancel()
            raise StorageError(f"{what}: not connected to JetStream")
        await asyncio.wait((call, lost), return_when=asyncio.FIRST_COMPLETED)
        if not call.done():
            call.cancel()
            raise StorageError(f"{what}: the connection to JetStream dropped before the answer")
        return call.result()


async def connect(
    servers: list[str],
    give_up_after: float = 30,
    reconnected: Callable[[], Awaitable[None]] | None = None,
    loss: ConnectionLoss | None = None,
) -> Any:
    """A connection to ``servers``, which reconnects by itself later for as long as it lives
    (and then awaits ``reconnected()``); StorageError once ``give_up_after`` seconds passed
    without one. ``loss`` learns when the connection drops and comes back."""
    deadline = time.monotonic() + give_up_after
    options: dict[str, Any] = {}
    if loss is not None:
        options["disconnected_cb"] = loss.disconnected

    async def on_reconnect() -> None:
        if loss is not None:
            await loss.reconnected()
        if reconnected is not None:
            await reconnected()

    if loss is not None or reconnected is not None:
        options["reconnected_cb"] = on_reconnect

    async def attempt() -> Any:
        return await asyncio.wait_for(
            nats.connect(
                servers=servers,
                connect_timeout=2,
                max_reconnect_attempts=-1,
                error_cb=_log_error,
                **options,
            ),
            max(0.1, deadline - time.monotonic()),
        )

    where = redact_url(",".join(servers))
    return await until_ready(deadline, f"JetStream at {where} unavailable", attempt)


async def open_bucket(
    servers: list[str],
    config: KeyValueConfig,
    give_up_after: float = 30,
    reconnected: Callable[[], Awaitable[None]] | None = None,
) -> tuple[Any, Any]:
    """Connect to ``servers`` and open the key-value bucket of ``config``, creating it if it
    does not exist: ``(connection, bucket)``; ``reconnected`` as for :func:`connect`. A bucket
    that exists with fewer copies than ``config.replicas`` is given more (JetStream copies
    its values to the new replicas), never fewer; ``config.direct`` turns direct reads on (any
    replica answers a read, so reads go on while the stream elects a leader, possibly a moment
    behind it: only for values whose writes are compare-and-set). A bucket this call made or
    gave more copies is returned once its stream has a leader (it takes writes then)."""
    deadline = time.monotonic() + give_up_after
    nc = await connect(servers, give_up_after, reconnected)
    js = jetstream_context(nc, 5)

    stream = f"KV_{config.bucket}"
    changed = False  # made, or given more copies, by this call

    async def attempt() -> Any:
        nonlocal changed
        try:
            info = await js.stream_info(stream)
        except NotFoundError:
            bucket = await js.create_key_value(config)
            changed = True
        else:
            if await _upgrade(js, info.config, config.replicas, bool(config.direct)):
                changed = True
            bucket = await js.key_value(config.bucket)  # as it is now
        if changed:
            # a stream answers writes once its copies elected a leader (before, a write gets
            # "no responders"): a bucket just made, or given more copies, is ready then
            cluster = (await js.stream_info(stream)).cluster
            if cluster is not None and not cluster.leader:
                raise TimeoutError(f"stream {stream} has no leader yet")
        return bucket

    try:
        return nc, await until_ready(
            deadline,
            f"JetStream at {redact_url(','.join(servers))} unavailable (bucket {config.bucket})",
            attempt,
        )
    except StorageError:
        await nc.close()
        raise


async def _upgrade(js: Any, stream: StreamConfig, replicas: int, direct: bool) -> bool:
    """Give a bucket's stream at least ``replicas`` copies, and direct reads if asked;
    whether it changed."""
    have = stream.num_replicas or 1
    if have >= replicas and (stream.allow_direct or not direct):
        return False
    stream.num_replicas = max(have, replicas)
    stream.allow_direct = bool(stream.allow_direct) or direct
    await js.update_stream(stream)
    log.info("stream %s: %d copies (was %d)", stream.name, stream.num_replicas, have)
    return True


async def kv_last(js: Any, bucket: str, key: str) -> tuple[bytes | None, int]:
    """Key ``key`` of bucket ``bucket`` as its last message says: ``(value, revision)``, the
    value None when the key is absent, deleted or expired (revision 0 when it never was).
    A direct read (the bucket must allow them): any replica answers, possibly a moment behind
    the leader; compare-and-set writes decide, never this read.

    The key-value client's own ``get`` takes the marker the server writes when a value
    expires (header ``Nats-Marker-Reason``) for a value, and its ``create`` then refuses to
    take the key until the marker itself expires; this reads the marker as a deletion."""
    try:
        msg = await js.get_last_msg(f"KV_{bucket}", f"$KV.{bucket}.{key}", direct=True)
    except NotFoundError:
        return None, 0
    headers = msg.headers or {}
    if headers.get("KV-Operation") in ("DEL", "PURGE") or "Nats-Marker-Reason" in headers:
        return None, int(msg.seq)
    return bytes(msg.data or b""), int(msg.seq)


LISTING_INACTIVE_SECONDS = 2.0


class KvEntry(NamedTuple):
    """A key-value entry as a listing gives it (``value`` empty when values were not asked)."""

    key: str
    value: bytes
    revision: int


def _is_deletion(headers: dict[str, str] | None) -> bool:
    if not headers:
        return False
    return headers.get("KV-Operation") in ("DEL", "PURGE") or "Nats-Marker-Reason" in headers


async def live_entries(kv: Any, pattern: str, *, values: bool = True) -> list[KvEntry]:
    """The entries of bucket ``kv`` whose keys match ``pattern`` now (deleted and expired keys
    left out; ``values=False``: keys and revisions only).

    A listing is a pull consumer of the bucket's last message per key: the number of messages
    it has to give is known when it is made (the key-value client's watch instead guesses the
    end of the current values, and under load said "end" before values already on their way:
    a listing came back empty). The server removes the consumer
    ``LISTING_INACTIVE_SECONDS`` after the listing (the client's default, five minutes, let
    frequent listings pile consumers up to the server's limit)."""
    js, stream, prefix = kv._js, kv._stream, kv._pre  # the bucket's stream and subjects
    entries = []
    messages = await snapshot(
        js, stream, prefix + pattern, DeliverPolicy.LAST_PER_SUBJECT, headers_only=not values
    )
    for msg in messages:
        if not _is_deletion(msg.headers):
            key = msg.subject[len(prefix) :]
            data = bytes(msg.data or b"") if values else b""
            entries.append(KvEntry(key, data, int(msg.metadata.sequence.stream)))
    return entries


async def snapshot(
    js: Any, stream: str, subject: str, deliver: DeliverPolicy, *, headers_only: bool
) -> list[Any]:
    """The messages of ``stream`` on ``subject`` that are there now (``deliver``: all, or
    the last of each subject), in stream order, through a pull consumer the server removes
    ``LISTING_INACTIVE_SECONDS`` after it was last used. How many messages to give is known
    when the consumer is made, so the snapshot ends exactly there (``headers_only``: the
    bodies' sizes are in the header ``Nats-Msg-Size``).

    They are asked for in one request and received on a plain subscription, not through
    the client's ``fetch`` (which costs a task and a future per message: 65 µs of CPU per
    message against 14 here; a ledger of 14,000 records took 2-3 s to scan). The request
    fails once no message came for the request timeout."""
    config = ConsumerConfig(
        deliver_policy=deliver,
        ack_policy=AckPolicy.NONE,
        headers_only=headers_only,
        inactive_threshold=LISTING_INACTIVE_SECONDS,
        mem_storage=True,
        num_replicas=1,
        filter_subject=subject,
    )
    consumer = await js.add_consumer(stream, config)
    listing = _Listing(consumer.num_pending or 0)
    if listing.remaining == 0:
        return []
    nc = js._nc
    sub = await nc.subscribe(nc.new_inbox(), cb=listing.take)
    try:
        request = json.dumps({"batch": listing.remaining, "no_wait": True}).encode()
        ask = f"{js._prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer.name}"
        await nc.publish(ask, request, reply=sub.subject)
        while not listing.done.done():
            seen = len(listing.messages)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(listing.done), request_timeout(5))
            if not listing.done.done() and len(listing.messages) == seen:
                raise TimeoutError(f"listing {subject}: no message for a while")
        listing.check()
    finally:
        with contextlib.suppress(*NATS_ERRORS):
            await sub.unsubscribe()
    return listing.messages


class _Listing:
    """The messages of a snapshot as they arrive."""

    def __init__(self, pending: int) -> None:
        self.remaining = pending
        self.messages: list[Any] = []
        self._refused = ""
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def take(self, msg: Any) -> None:
        status = (msg.headers or {}).get("Status")
        if status is not None:  # 404/408: nothing more now (deleted meanwhile); else refused
            if status not in ("404", "408"):
                self._refused = f"{status} {(msg.headers or {}).get('Description', '')}"
            self.remaining = 0
        else:
            self.messages.append(msg)
            self.remaining = min(self.remaining - 1, msg.metadata.num_pending or 0)
        if self.remaining == 0 and not self.done.done():
            self.done.set_result(None)

    def check(self) -> None:
        """A NATS error when the server refused the request."""
        if self._refused:
            raise nats.errors.Error(f"listing refused: {self._refused.strip()}")
