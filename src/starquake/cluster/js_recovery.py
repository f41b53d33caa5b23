"""Opening a managed ledger in JetStream: take it over from whoever owned it before.

1. Read the ledger list and its version (none: a new managed ledger, version 0).
2. Fence every ledger the list does not show sealed (the previous owner's open ledger): its
   writer's next append is refused; the ledger is sealed at its last entry before the fence
   and its record index comes from scanning its subject.
3. Begin a new ledger on the last one's stream (and take a spare id there for the first
   rollover) and store the list by
   compare-and-set at the version read: if another owner stored it meanwhile, opening fails
   with :class:`LedgerFencedError` (that owner won; opening again fences it in turn).
4. Restore each durable cursor and store its state again at the version read, so that the
   previous owner's next cursor write fails (and fences it) instead of overwriting this one.
"""

from __future__ import annotations

import logging
from urllib.parse import unquote

from starquake.cluster.js_ledgers import JetStreamLedgers
from starquake.cluster.js_managed_ledger import JetStreamManagedLedger
from starquake.cluster.js_ml_metadata import ManagedLedgerInfo, cursor_path, ledger_path
from starquake.cluster.kv_metadata import BadVersionError, JetStreamMetadataStore
from starquake.storage.position import StorageError

__all__ = ["recover_managed_ledger"]

log = logging.getLogger(__name__)

_CURSOR_ATTEMPTS = 5


async def recover_managed_ledger(
    ml: JetStreamManagedLedger,
    ledgers: JetStreamLedgers,
    metadata: JetStreamMetadataStore,
    now: float,
) -> None:
    """Load ``ml`` from JetStream as its new owner (see the module docstring)."""
    got = await metadata.get_versioned(ledger_path(ml.name))
    info = ManagedLedgerInfo.decode(got.value) if got is not None else ManagedLedgerInfo()
    for stored in info.ledgers:
        if not stored.sealed:
            index = await ledgers.fence(stored.ledger_id)
            stored.entries, stored.size, stored.index = index.entries, index.size, index
            stored.sealed = stored.fenced = True
            log.info(
                "managed ledger %s: ledger %d fenced and sealed at %d entries",
                ml.name,
                stored.ledger_id,
                index.entries,
            )
        ml.add_ledger(stored)
    ml.version = got.version if got is not None else 0
    # the new ledger goes where the last one is: that stream just answered the fence (or
    # served the previous owner), where another might be electing a leader
    stream = ledgers.stream_of(info.ledgers[-1].ledger_id) if info.ledgers else None
    first = await ledgers.allocate_ledger_id(stream)
    ml.start_ledger(first, now)
    ml.spare_id = await ledgers.allocate_ledger_id(ledgers.stream_of(first))
    ml.refresh_last_confirmed()
    ml.set_purge(info.purge)
    ml.compacted = info.compacted
    await ml.store_ledger_list()
    for child in await metadata.list_children(ledger_path(ml.name)):
        await _take_cursor(ml, metadata, unquote(child))


async def _take_cursor(
    ml: JetStreamManagedLedger, metadata: JetStreamMetadataStore, name: str
) -> None:
    key = cursor_path(ml.name, name)
    for _ in range(_CURSOR_ATTEMPTS):
        got = await metadata.get_versioned(key)
        if got is None:
            return  # deleted meanwhile
        try:
            version = await metadata.put(key, got.value, expected_version=got.version)
        except BadVersionError:
            continue  # the previous owner wrote it just now: read it again
        _restore_cursor(ml, name, got.value)
        ml.cursor_versions[key] = version
        return
    raise StorageError(f"{ml.name}: cursor {name} keeps changing while it is taken over")


def _restore_cursor(ml: JetStreamManagedLedger, name: str, raw: bytes) -> None:
    ml.restore_cursor(name, ml.restored_cursor(name, raw))
