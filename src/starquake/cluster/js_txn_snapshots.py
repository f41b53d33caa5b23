"""Where a topic's transaction-buffer snapshot lives in cluster mode: one value of the versioned
metadata store per managed ledger, at ``/transaction-buffer-snapshots/<encoded name>``.

Pulsar keeps a topic's snapshot in its namespace's ``__transaction_buffer_snapshot`` topic,
keyed by the topic's name, so that whichever broker owns the topic next finds it; this value
plays that part (a broker's local directory would not). It is deleted with the managed ledger
(before its ledgers), so a topic deleted and made again never meets an old one.

Writes are compare-and-set at the version this instance read or wrote last, and only while
the managed ledger is open here: a write from a previous owner that lost the topic, or made
after the managed ledger was deleted, is refused instead of replacing a newer snapshot or
bringing a deleted one back (a write already under way when the managed ledger is deleted is
caught by the deletion, which removes the snapshot first and again last).
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote

from starquake.cluster.jetstream import storage_errors
from starquake.cluster.kv_metadata import JetStreamMetadataStore
from starquake.storage import ABSENT, BadVersionError, StorageError

__all__ = ["SNAPSHOTS_ROOT", "JetStreamSnapshotStore", "snapshot_path"]

SNAPSHOTS_ROOT = "/transaction-buffer-snapshots"


def snapshot_path(name: str) -> str:
    """The metadata path of managed ledger ``name``'s transaction-buffer snapshot."""
    return SNAPSHOTS_ROOT + "/" + quote(name, safe="")


class JetStreamSnapshotStore:
    """The snapshot of one managed ledger (see the module docstring)."""

    def __init__(
        self, metadata: JetStreamMetadataStore, name: str, is_open: Callable[[], bool]
    ) -> None:
        self._metadata = metadata
        self._path = snapshot_path(name)
        self._is_open = is_open
        self._version: int | None = None
        """The stored version this instance knows (None: not read yet)."""

    @property
    def where(self) -> str:
        """Where the snapshot is kept, for logs."""
        return self._path

    async def read(self) -> bytes | None:
        """The stored snapshot (None: none); StorageError when JetStream does not answer."""
        with storage_errors(f"reading {self._path}"):
            got = await self._metadata.get_versioned(self._path)
        self._version = ABSENT if got is None else got.version
        return None if got is None else got.value

    async def write(self, data: bytes) -> None:
        """Store ``data`` at the version known here; StorageError when it was written or
        deleted by someone else since (the version is read again for the next write: a
        snapshot covers a prefix of the topic whoever took it), when the managed ledger was
        closed here, or when JetStream refused it."""
        if not self._is_open():
            raise StorageError(f"{self._path}: its managed ledger is closed here")
        if self._version is None:
            await self.read()
        assert self._version is not None
        try:
            with storage_errors(f"writing {self._path}"):
                self._version = await self._metadata.put(self._path, data, self._version)
        except BadVersionError:
            self._version = None
            raise StorageError(f"{self._path} was changed by another broker") from None
