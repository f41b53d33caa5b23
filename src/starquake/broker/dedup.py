"""Broker-side message deduplication (``brokerDeduplicationEnabled``).

Per producer name the topic keeps two watermarks:

* ``pushed``: the highest sequence id accepted for append (updated by :meth:`check`);
* ``persisted``: the highest sequence id whose entry is durable (updated by :meth:`on_persisted`).

A SEND whose ``sequence_id`` is at or below ``persisted`` is a duplicate (receipt ``-1:-1``, not
stored); one above ``persisted`` but at or below ``pushed`` is of unknown status (its first copy is
still in flight: the producer gets an error and retries); anything above ``pushed`` is new.

The state survives restarts through a snapshot in the metadata store plus a replay of the log
written after it (:meth:`recover`). A snapshot is due every ``snapshot_interval_entries`` persisted
entries (the broker setting ``brokerDeduplicationEntriesInterval``, default 1000), and the managed
ledger is not trimmed past the last snapshot stored, nor at all before the first
(:meth:`MessageDeduplication.trim_hold`). Snapshot layout (UTF-8 JSON)::

    {"version": 1,
     "position": [ledger_id, entry_id] | null,    # last entry the snapshot accounts for
     "producers": [[producer_name, highest_persisted_sequence_id], ...]}   # oldest activity first

Everything here is synchronous and does no I/O of its own: the broker stores the snapshot bytes
(off the event loop) and passes the :class:`ManagedLedger` in for recovery.
"""

from __future__ import annotations

import json
import logging
from enum import Enum
from urllib.parse import quote

from starquake.broker.config import BrokerConfig
from starquake.broker.resource_keys import DEDUP_SNAPSHOTS
from starquake.protocol.errors import ProtocolError
from starquake.protocol.framing import entry_metadata
from starquake.protocol.wire import pb
from starquake.storage import ManagedLedger, Position

__all__ = [
    "DEFAULT_SNAPSHOT_INTERVAL_ENTRIES",
    "NO_HIGHEST_SEQUENCE_ID",
    "DedupStatus",
    "MessageDeduplication",
]

log = logging.getLogger(__name__)

_SNAPSHOT_VERSION = 1
DEFAULT_SNAPSHOT_INTERVAL_ENTRIES = BrokerConfig.brokerDeduplicationEntriesInterval
_REPLAY_BATCH = 500
_NONE = -1  # sequence ids are unsigned on the wire: -1 is below every real one
NO_HIGHEST_SEQUENCE_ID = _NONE
"""The highest sequence id of a SEND that declares none (what its receipt echoes, as Pulsar's)."""


class DedupStatus(Enum):
    """Outcome of :meth:`MessageDeduplication.check` (Pulsar's ``MessageDupStatus``)."""

    NOT_DUP = "not_dup"
    """New message: store it."""
    DUPLICATE = "duplicate"
    """Already durable: reply SEND_RECEIPT with ledger/entry ``-1:-1`` and do not store."""
    UNKNOWN = "unknown"
    """A copy may still be in flight: reply an error so that the producer retries later."""


class MessageDeduplication:
    """Deduplication state of one topic (partition).

    While enabled but not yet recovered (right after construction with ``enabled=True``, or after
    ``enabled`` was switched on), :meth:`check` answers :attr:`DedupStatus.UNKNOWN` for every
    message, so nothing is stored twice while the state is incomplete; :meth:`recover` makes the
    instance ready.

    ``snapshot_interval_entries`` is how many persisted entries make a snapshot due
    (:meth:`snapshot_due`): every persisted entry counts, markers and chunks included.
    """

    def __init__(
        self,
        topic_name: str,
        *,
        enabled: bool,
        max_producers: int = 10000,
        snapshot_interval_entries: int = DEFAULT_SNAPSHOT_INTERVAL_ENTRIES,
    ) -> None:
        if max_producers < 1:
            raise ValueError("max_producers must be at least 1")
        if snapshot_interval_entries < 1:
            raise ValueError("snapshot_interval_entries must be at least 1")
        self.topic_name = topic_name
        self.max_producers = max_producers
        self.snapshot_interval_entries = snapshot_interval_entries
        # both dicts are kept in order of last activity (oldest first): the eviction order
        self._pushed: dict[str, int] = {}
        self._persisted: dict[str, int] = {}
        self._connected: dict[str, int] = {}
        self._position: Position | None = None
        self._since_snapshot = 0
        self._stored_position: Position | None = None
        self._enabled = enabled
        self._ready = False
        self._generation = 0

    # ------------------------------------------------------------------ status

    @property
    def enabled(self) -> bool:
        """Whether deduplication is configured on for this topic."""
        return self._enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        if value == self._enabled:
            return
        self._enabled = value
        self._ready = False
        self._generation += 1
        self._clear()

    @property
    def generation(self) -> int:
        """Changes each time deduplication is switched on or off: a snapshot taken before a
        switch must not count as stored after it (see :meth:`snapshot_stored`)."""
        return self._generation

    @property
    def ready(self) -> bool:
        """Enabled and recovered: :meth:`check` gives real answers."""
        return self._enabled and self._ready

    def _clear(self) -> None:
        self._pushed.clear()
        self._persisted.clear()
        self._position = None
        self._since_snapshot = 0
        self._stored_position = None

    # ------------------------------------------------------------------ publish path

    def check(
        self,
        producer_name: str,
        sequence_id: int,
        highest_sequence_id: int = _NONE,
        *,
        is_marker: bool = False,
        is_last_chunk: bool = True,
    ) -> DedupStatus:
        """Classify an incoming SEND; a :attr:`DedupStatus.NOT_DUP` answer records it as pushed.

        ``highest_sequence_id`` is the SEND's field 6 (:data:`NO_HIGHEST_SEQUENCE_ID` when
        unset); the watermark becomes ``max(sequence_id, highest_sequence_id)``, as in Pulsar: a
        batch that declares no highest id counts as its ``sequence_id`` alone. Marker messages
        and the chunks before the last one of a chunked message are never deduplicated (all
        chunks share one sequence id; only the last one counts), as in Pulsar.
        """
        if not self._enabled or is_marker or not is_last_chunk:
            return DedupStatus.NOT_DUP
        if not self._ready:
            return DedupStatus.UNKNOWN
        pushed = self._pushed.get(producer_name, _NONE)
        if sequence_id <= pushed:
            if sequence_id <= self._persisted.get(producer_name, _NONE):
                return DedupStatus.DUPLICATE
            return DedupStatus.UNKNOWN
        self._touch(self._pushed, producer_name, max(sequence_id, highest_sequence_id))
        self._evict()
        return DedupStatus.NOT_DUP

    def on_persisted(
        self,
        producer_name: str,
        sequence_id: int,
        highest_sequence_id: int,
        position: Position,
        *,
        is_marker: bool = False,
        is_last_chunk: bool = True,
    ) -> None:
        """The entry at ``position`` is durable (call in position order, as receipts go out)."""
        if not self.ready:
            return
        self._position = position
        self._since_snapshot += 1
        if is_marker or not is_last_chunk:
            return
        self._record(producer_name, max(sequence_id, highest_sequence_id))
        self._evict()

    def on_failed(
        self, producer_name: str, sequence_id: int, highest_sequence_id: int = _NONE
    ) -> None:
        """The append of a message accepted by :meth:`check` failed: let its retry in.

        ``pushed`` goes back to just below ``sequence_id`` (never below ``persisted``), so the
        failed message and anything accepted after it are new again, while earlier messages still
        in flight keep answering :attr:`DedupStatus.UNKNOWN`. Pulsar resets every producer's
        ``pushed`` to ``persisted`` instead (:meth:`reset_pushed`); this is the narrower form.
        """
        del highest_sequence_id  # the rollback point depends on the first id only
        if not self.ready:
            return
        pushed = self._pushed.get(producer_name)
        if pushed is None:
            return
        floor = self._persisted.get(producer_name, _NONE)
        rolled = max(floor, min(pushed, sequence_id - 1))
        if rolled == _NONE and producer_name not in self._persisted:
            del self._pushed[producer_name]
        else:
            self._pushed[producer_name] = rolled

    def reset_pushed(self) -> None:
        """Set every producer's ``pushed`` back to ``persisted`` (Pulsar's topic-wide rollback)."""
        if not self.ready:
            return
        self._pushed = dict(self._persisted)

    def last_sequence_id(self, producer_name: str) -> int:
        """``PRODUCER_SUCCESS.last_sequence_id``: the highest id pushed, ``-1`` if unknown."""
        if not self.ready:
            return -1
        return self._pushed.get(producer_name, _NONE)

    def highest_persisted(self, producer_name: str) -> int:
        """The highest durable sequence id of ``producer_name``, ``-1`` if unknown."""
        if not self.ready:
            return -1
        return self._persisted.get(producer_name, _NONE)

    def persisted_state(self) -> dict[str, int]:
        """A copy of the ``producer -> highest persisted sequence id`` map."""
        return dict(self._persisted)

    def pushed_state(self) -> dict[str, int]:
        """A copy of the ``producer -> highest pushed sequence id`` map."""
        return dict(self._pushed)

    def __len__(self) -> int:
        """Number of producers tracked."""
        return len(self._pushed.keys() | self._persisted.keys())

    # ------------------------------------------------------------------ producers and eviction

    def producer_connected(self, producer_name: str) -> None:
        """A producer with this name is attached: it is not evicted while attached."""
        self._connected[producer_name] = self._connected.get(producer_name, 0) + 1

    def producer_disconnected(self, producer_name: str) -> None:
        """One attachment of this producer name went away."""
        count = self._connected.get(producer_name, 0) - 1
        if count > 0:
            self._connected[producer_name] = count
        else:
            self._connected.pop(producer_name, None)
            self._evict()

    @staticmethod
    def _touch(table: dict[str, int], name: str, value: int) -> None:
        table.pop(name, None)
        table[name] = value

    def _record(self, name: str, sequence_id: int) -> None:
        self._touch(self._persisted, name, sequence_id)
        pushed = self._pushed.pop(name, _NONE)
        self._pushed[name] = max(pushed, sequence_id)

    def _evict(self) -> None:
        """Forget the least recently active producers beyond ``max_producers``.

        Producers still attached, or with a message in flight (pushed above persisted), stay.
        """
        excess = len(self._pushed) - self.max_producers
        if excess <= 0:
            return
        victims: list[str] = []
        for name, pushed in self._pushed.items():
            if name in self._connected or pushed > self._persisted.get(name, _NONE):
                continue
            victims.append(name)
            if len(victims) == excess:
                break
        for name in victims:
            del self._pushed[name]
            self._persisted.pop(name, None)

    # ------------------------------------------------------------------ snapshots and recovery

    @staticmethod
    def metadata_key(topic_name: str) -> str:
        """Metadata-store key of a topic's snapshot (outside the managed ledger's cursor keys)."""
        return DEDUP_SNAPSHOTS + "/" + quote(topic_name, safe="")

    def snapshot_due(self) -> bool:
        """At least ``snapshot_interval_entries`` entries were persisted since the last snapshot."""
        return self.ready and self._since_snapshot >= self.snapshot_interval_entries

    def trim_hold(self) -> Position | None:
        """The last position the managed ledger may trim up to (None: no limit).

        Recovery replays the log after the stored snapshot's position, so nothing after it may
        be deleted: while enabled, the stored snapshot holds trimming back as Pulsar's
        deduplication cursor does (with no stored snapshot yet, nothing is trimmed).
        """
        if not self._enabled:
            return None
        if self._stored_position is None:
            return Position(-1, -1)
        return self._stored_position

    def snapshot_stored(self, position: Position | None) -> None:
        """A snapshot taken at ``position`` (see :meth:`take_snapshot`) is durable."""
        if position is not None and (
            self._stored_position is None or position > self._stored_position
        ):
            self._stored_position = position

    @property
    def snapshot_position(self) -> Position | None:
        """The position the next :meth:`take_snapshot` accounts up to."""
        return self._position

    def take_snapshot(self) -> tuple[str, bytes]:
        """Serialize the persisted state; returns ``(metadata key, value)`` for the broker to store.

        The snapshot accounts for every entry up to the last position passed to
        :meth:`on_persisted` (or reached by :meth:`recover`), :attr:`snapshot_position`; tell
        :meth:`snapshot_stored` once it is durable.
        """
        position = self._position
        doc = {
            "version": _SNAPSHOT_VERSION,
            "position": None if position is None else [position.ledger_id, position.entry_id],
            "producers": [[name, seq] for name, seq in self._persisted.items()],
        }
        self._since_snapshot = 0
        data = json.dumps(doc, separators=(",", ":")).encode()
        return self.metadata_key(self.topic_name), data

    @staticmethod
    def _decode_snapshot(data: bytes) -> tuple[Position | None, list[tuple[str, int]]]:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("version") != _SNAPSHOT_VERSION:
            raise ValueError("unsupported deduplication snapshot")
        raw_position = doc.get("position")
        position = None
        if raw_position is not None:
            ledger_id, entry_id = raw_position
            position = Position(int(ledger_id), int(entry_id))
        producers = [(str(name), int(seq)) for name, seq in doc.get("producers", [])]
        return position, producers

    async def recover(self, snapshot: bytes | None, ledger: ManagedLedger) -> int:
        """Rebuild the state from ``snapshot`` and the entries stored after it; returns how many.

        Without a (readable) snapshot the whole stored log is replayed. Each replayed entry sets
        its producer's watermarks to the highest sequence id it carries (see :func:`_highest_of`;
        the latest entry wins, as in Pulsar's replay). Marker entries, chunks other than a
        message's last one, and entries whose metadata cannot be parsed are skipped (still
        counted as replayed). If the replay covered at least ``snapshot_interval_entries``
        entries, :meth:`snapshot_due` is true afterwards. A no-op returning 0 when disabled.
        """
        if not self._enabled:
            return 0
        self._clear()
        position: Position | None = None
        if snapshot is not None:
            try:
                position, producers = self._decode_snapshot(snapshot)
            except (ValueError, TypeError, KeyError) as exc:
                log.warning(
                    "[%s] unreadable deduplication snapshot, replaying the whole log: %s",
                    self.topic_name,
                    exc,
                )
                position, producers = None, []
            for name, seq in producers:
                self._persisted[name] = seq
                self._pushed[name] = seq
            self._stored_position = position
        end = ledger.last_confirmed
        start = ledger.next_position(position) if position is not None else ledger.first_position()
        replayed = 0
        while start is not None and start <= end:
            entries = await ledger.read_entries(start, _REPLAY_BATCH)
            for entry in entries:
                if entry.position > end:
                    break
                replayed += 1
                position = entry.position
                try:
                    md = entry_metadata(entry.data)
                except ProtocolError:
                    continue
                if md.HasField("marker_type"):
                    continue
                if md.num_chunks_from_msg > 1 and md.chunk_id != md.num_chunks_from_msg - 1:
                    continue
                self._record(md.producer_name, _highest_of(md))
            if not entries or entries[-1].position >= end:
                break
            start = ledger.next_position(entries[-1].position)
        # nothing is in flight during a recovery: a producer whose ids went back (its ids were
        # reused while deduplication was off) is at its latest id, not stuck between the two
        self._pushed = dict(self._persisted)
        self._position = position
        self._since_snapshot = replayed
        self._ready = True
        self._evict()
        return replayed

    def __repr__(self) -> str:
        state = "ready" if self.ready else ("recovering" if self._enabled else "disabled")
        return f"MessageDeduplication({self.topic_name!r}, {state}, producers={len(self)})"


def _highest_of(md: pb.MessageMetadata) -> int:
    """The highest sequence id a stored entry carries, as Pulsar's recovery reads it: the larger
    of its metadata's ``sequence_id`` and ``highest_sequence_id`` (0 when unset). A batch
    without ``highest_sequence_id`` counts as its ``sequence_id`` alone, whatever its size:
    the ids in a batch need not be consecutive (key-based batches interleave)."""
    return max(md.sequence_id, md.highest_sequence_id)
