"""JetStreamLedgerFactory: opens managed ledgers whose entries are in NATS JetStream.

The JetStream counterpart of :class:`~starquake.storage.factory.ManagedLedgerFactory`: managed
ledgers by name, one shared entry cache, the hooks through which the broker learns that
appends became durable (``on_committed``, the same ``[(managed ledger, last confirmed)]`` a
file-backed group commit reports) or failed (``on_failed``), and the periodic store of durable
cursors (every ``cursor_flush_seconds``, as the broker flushes the file backend's cursors).

Opening a managed ledger takes it over from any previous owner, in this process or another
(:mod:`starquake.cluster.js_recovery`); the previous owner's appends and metadata writes are
refused from then on.

It is also the broker's ``LedgerStorage`` in cluster mode (``open_ledger``, ``exists``,
``list_names``, ``delete``, ...): the names of the stored managed ledgers are known from a
watch of their ledger lists (one key each; their cursors' keys are not watched), started by
:meth:`JetStreamLedgerFactory.connect`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from starquake.cluster.jetstream import NATS_ERRORS, requests_capped, storage_errors
from starquake.cluster.js_compacted import JetStreamCompactedLedgers
from starquake.cluster.js_ledgers import JetStreamLedgers
from starquake.cluster.js_managed_ledger import JetStreamManagedLedger
from starquake.cluster.js_ml_metadata import LEDGERS_ROOT, ManagedLedgerInfo, ledger_path
from starquake.cluster.js_recovery import recover_managed_ledger
from starquake.cluster.js_txn_snapshots import snapshot_path
from starquake.cluster.kv_metadata import JetStreamMetadataStore
from starquake.storage import ManagedLedger, PendingCommit
from starquake.storage.append_stats import AppendStats
from starquake.storage.config import ManagedLedgerConfig
from starquake.storage.directories import directory_name
from starquake.storage.position import (
    LedgerBusyError,
    LedgerFencedError,
    Position,
    StorageError,
)
from starquake.storage.state import EntryCache

__all__ = ["JetStreamLedgerFactory"]

log = logging.getLogger(__name__)

CommittedCallback = Callable[[Sequence[tuple[ManagedLedger, Position]]], None]
FailedCallback = Callable[[Sequence[ManagedLedger], BaseException], None]

DEFAULT_MAX_RECORD_BYTES = 1024 * 1024
_TAKEOVER_ATTEMPTS = 3
# How long an open goes on trying while JetStream does not answer (a stream whose leader
# died elects another within 4-9 s plus its campaign) before the broker answers
# ServiceNotReady, and the pause between tries. Pulsar's topic load waits for its storage too
# (up to topicLoadTimeoutSeconds, 60 s); a client retrying by itself backs off exponentially
# and would come back seconds after the store did.
OPEN_RETRY_SECONDS = 15.0
_OPEN_RETRY_PAUSE = 0.25
# The attempts begun in a load's first CAPPED_SECONDS give each request
# ATTEMPT_REQUEST_SECONDS for JetStream's answer, later ones their usual time (for a store
# that is only slow; a count of attempts instead let an uncapped one straddle the end of a
# 7 s election: +2.4 s). A load is often the
# reload after a failed append while some stream elects a leader: a request sent to a stream
# without one is never answered, so an attempt begun just before the election ends then
# would otherwise wait out a whole request timeout (up to 5 s) after it.
ATTEMPT_REQUEST_SECONDS = 1.0
CAPPED_SECONDS = 12.0


class JetStreamLedgerFactory:
    """Managed ledgers in JetStream; ``base_dir`` holds their local directories only."""

    def __init__(
        self,
        ledgers: JetStreamLedgers,
        metadata: JetStreamMetadataStore,
        base_dir: Path,
        config: ManagedLedgerConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        on_committed: CommittedCallback | None = None,
        on_failed: FailedCallback | None = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        cursor_flush_seconds: float = 1.0,
    ) -> None:
        self.ledgers = ledgers
        self.metadata = metadata
        self.base_dir = Path(base_dir)
        self.config = config if config is not None else ManagedLedgerConfig()
        self.cache = EntryCache(self.config.cache_max_bytes, self.config.cache_eviction_watermark)
        self.max_record_bytes = max_record_bytes
        self._clock = clock
        self._on_committed = on_committed
        self._on_failed = on_failed
        self._flush_seconds = cursor_flush_seconds
        self._open: dict[str, JetStreamManagedLedger] = {}
        self._closing: dict[str, JetStreamManagedLedger] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._owned: list[Any] = []
        self._closed = False
        self._names_lock = threading.Lock()
        self._names: set[str] = set()
        self.compacted_ledgers = JetStreamCompactedLedgers(ledgers, max_record_bytes)
        """The managed ledgers' compacted ledgers, ledgers of ``ledgers`` too."""

    @classmethod
    async def connect(
        cls,
        servers: list[str],
        base_dir: Path,
        *,
        streams: int = 4,
        replicas: int = 1,
        request_timeout: float = 10,
        give_up_after: float = 30,
        **options: Any,
    ) -> JetStreamLedgerFactory:
        """A factory with its own connections to ``servers`` (closed with it), watching the
        names of the stored managed ledgers; ``request_timeout``: how long an append waits
        for JetStream's answer before it fails; StorageError when the servers do not answer
        within ``give_up_after`` seconds."""
        ledgers = await JetStreamLedgers.connect(
            servers,
            streams=streams,
            replicas=replicas,
            request_timeout=request_timeout,
            give_up_after=give_up_after,
        )
        try:
            metadata = await JetStreamMetadataStore.connect(
                servers, replicas=replicas, give_up_after=give_up_after
            )
        except StorageError:
            await ledgers.close()
            raise
        factory = cls(ledgers, metadata, base_dir, **options)
        factory._owned = [ledgers, metadata]
        try:
            await asyncio.wait_for(factory._watch_names(), give_up_after)
        except (StorageError, TimeoutError, *NATS_ERRORS) as exc:
            await factory.close()
            raise StorageError(f"cannot watch the managed ledgers' names: {exc!r}") from None
        return factory

    async def _watch_names(self) -> None:
        loaded = asyncio.Event()

        def seen(path: str, value: bytes | None, version: int) -> None:
            name = unquote(path.rsplit("/", 1)[1])
            with self._names_lock:
                if value is None:
                    self._names.discard(name)
                else:
                    self._names.add(name)

        await self.metadata.watch(LEDGERS_ROOT, seen, loaded.set, children_only=True)
        await loaded.wait()

    # ------------------------------------------------------------------ host of the ledgers

    def now(self) -> float:
        return self._clock()

    def committed(self, ml: JetStreamManagedLedger, last_confirmed: Position) -> None:
        if self._on_committed is not None:
            self._on_committed([(ml, last_confirmed)])

    def failed(self, ml: JetStreamManagedLedger, exc: BaseException) -> None:
        if self._on_failed is not None:
            self._on_failed([ml], exc)

    def ledger_closed(self, ml: JetStreamManagedLedger) -> None:
        if self._open.get(ml.name) is ml:
            del self._open[ml.name]
            self._closing[ml.name] = ml

    # ------------------------------------------------------------------ managed ledgers

    async def open(self, name: str, *, request_cap: float | None = None) -> JetStreamManagedLedger:
        """Open (taking over, or creating) the managed ledger ``name``; the same instance
        until it is closed or fenced. LedgerFencedError when another owner stored the
        ledger list while this one opened it (open again to take it over). ``request_cap``:
        the longest the takeover's requests wait for an answer (None: their usual time)."""
        self._check_open(name)
        ml = self._open.get(name)
        if ml is not None and not ml.fenced:
            return ml
        if ml is not None:
            ml.close()
        previous = self._closing.pop(name, None)
        if previous is not None:
            await previous.drain()  # its last appends land before the fence
            await previous.flush_cursors()
        ml = await self._take_over(name, request_cap)
        self._open[name] = ml
        ml.start()
        if self._flusher is None and self._flush_seconds > 0:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())
        log.info("managed ledger %s opened at %s", name, ml.last_confirmed)
        return ml

    def _check_open(self, name: str) -> None:
        """StorageError when no ledger can be opened, whatever JetStream answers."""
        if self._closed:
            raise StorageError("factory is closed")
        if not name or name in (".", ".."):
            raise StorageError(f"invalid managed ledger name {name!r}")

    async def _take_over(self, name: str, request_cap: float | None) -> JetStreamManagedLedger:
        directory = self.base_dir / directory_name(name)
        for attempt in range(_TAKEOVER_ATTEMPTS):
            ml = JetStreamManagedLedger(self, name, directory)
            try:
                with (
                    storage_errors(f"managed ledger {name}"),  # e.g. metadata not answering
                    requests_capped(request_cap),
                ):
                    await recover_managed_ledger(ml, self.ledgers, self.metadata, self._clock())
                return ml
            except LedgerFencedError:
                # the previous owner stored its ledger list meanwhile (a rollover): fence
                # what it holds now
                if attempt + 1 == _TAKEOVER_ATTEMPTS:
                    raise
                log.info("managed ledger %s: its previous owner stored it meanwhile", name)
        raise AssertionError("unreachable")

    @property
    def append_stats(self) -> AppendStats:
        """The appends' latencies, sizes and failures, for the broker's metrics."""
        return self.ledgers.stats

    def get(self, name: str) -> JetStreamManagedLedger | None:
        """The open instance of ``name``, if any."""
        return self._open.get(name)

    # ------------------------------------------------------------------ as LedgerStorage

    def take_pending(self) -> PendingCommit | None:
        """Nothing for a group commit: each managed ledger writes its own records."""
        return None

    def listen(self, on_committed: CommittedCallback, on_failed: FailedCallback) -> None:
        """Report appends made durable, or failed, to these hooks from now on."""
        self._on_committed, self._on_failed = on_committed, on_failed

    async def open_ledger(self, name: str) -> ManagedLedger:
        """:meth:`open`; LedgerBusyError (retry) when another owner took it over while it
        opened, or when JetStream did not answer for :data:`OPEN_RETRY_SECONDS` (tried
        again meanwhile; the store may be back for the client's retry)."""
        self._check_open(name)  # not worth retrying (a factory closed meanwhile: below)
        started = time.monotonic()
        failed: StorageError | None = None
        for attempt in itertools.count():
            capped = time.monotonic() - started < CAPPED_SECONDS
            cap = ATTEMPT_REQUEST_SECONDS if capped else None
            try:
                with storage_errors(f"managed ledger {name}"):  # e.g. a cursor not stored
                    ml = await self.open(name, request_cap=cap)
            except LedgerBusyError:
                raise
            except StorageError as exc:
                if self._closed:
                    raise
                failed = exc
                if time.monotonic() + _OPEN_RETRY_PAUSE > started + OPEN_RETRY_SECONDS:
                    raise LedgerBusyError(
                        f"managed ledger {name} cannot be opened now: {exc}"
                    ) from None
                await asyncio.sleep(_OPEN_RETRY_PAUSE)
                continue
            if failed is not None:
                log.info(
                    "managed ledger %s: opened at attempt %d, %.1f s after the first (%s)",
                    name,
                    attempt + 1,
                    time.monotonic() - started,
                    failed,
                )
            return ml
        raise AssertionError("unreachable")

    def exists(self, name: str) -> bool:
        """Whether ``name`` is open here or has a stored ledger list (as the watch saw it)."""
        with self._names_lock:
            return name in self._open or name in self._names

    def list_names(self) -> list[str]:
        """The managed ledgers with a stored ledger list (as the watch saw them), sorted."""
        with self._names_lock:
            return sorted(self._names)

    async def allocate_ledger_id(self) -> int:
        """A ledger id never handed out before in the cluster."""
        return await self.ledgers.allocate_ledger_id()

    async def persist_cursors(self) -> None:
        """:meth:`flush_cursors`; StorageError when JetStream refuses or does not answer."""
        with storage_errors("storing cursor positions"):
            await self.flush_cursors()

    async def delete(self, name: str) -> None:
        """Delete the managed ledger ``name``: the open instance here discards its unwritten
        appends; its transaction-buffer snapshot, its cursors' states, its ledgers' records,
        then its ledger list go.

        Interrupted, it leaves the ledger list (the managed ledger still exists, some of its
        ledgers maybe without records): deleting it again finishes the work."""
        for registry in (self._open, self._closing):
            ml = registry.pop(name, None)
            if ml is not None:
                ml.drop()
        await self.metadata.delete(snapshot_path(name))  # first: never left without its topic
        path = ledger_path(name)
        for child in await self.metadata.list_children(path):
            await self.metadata.delete(f"{path}/{child}")
        found = await self.metadata.get(path)
        if found is not None:
            info = ManagedLedgerInfo.decode(found)
            compacted = [info.compacted.ledger_id] if info.compacted is not None else []
            for ledger_id in (
                [stored.ledger_id for stored in info.ledgers]
                + [lid for lid, _ in info.purge]
                + compacted
            ):
                await self.ledgers.delete(ledger_id)
            await self.metadata.delete(path)
        await self.metadata.delete(snapshot_path(name))  # and last: one written meanwhile
        with self._names_lock:
            self._names.discard(name)
        directory = self.base_dir / directory_name(name)
        await asyncio.to_thread(shutil.rmtree, directory, True)
        log.info("managed ledger %s deleted", name)

    async def flush_cursors(self) -> None:
        """Store every changed durable cursor now."""
        for ml in [*self._open.values(), *self._closing.values()]:
            await ml.flush_cursors()
        for name, ml in list(self._closing.items()):
            if not ml.busy():
                del self._closing[name]

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self._flush_seconds)
            try:
                await self.flush_cursors()
            except StorageError as exc:
                log.warning("storing cursors failed: %s", exc)

    async def close(self) -> None:
        """Close every managed ledger, wait for their appends, store their cursors."""
        if self._closed:
            return
        self._closed = True
        for ml in list(self._open.values()):
            ml.close()
        for ml in list(self._closing.values()):
            await ml.drain()
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        await self.flush_cursors()
        for owned in self._owned:
            await owned.close()
