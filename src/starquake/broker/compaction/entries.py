"""Stored entries as the compactor sees them: their messages' keys, and batches rewritten.

CPU work (metadata parsing, decompression, re-compression): the compactor runs these in a
worker thread.

Rewritten batches: Pulsar keeps a batch's size and replaces each message left out with an
empty one flagged ``compacted_out`` (field 4 of SingleMessageMetadata), so that batch indexes
stay the same, and its Java client skips those. The official C++ client (and the Python
client built on it) does not skip them: it would hand the application one empty, keyless
message per slot. So a kept batch is rebuilt with only its kept messages, in their order:
the entry keeps its original ledger and entry id, but the batch indexes of its messages in
the compacted view are renumbered from 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from starquake.broker.compaction.selection import EntryFacts, MessageFacts, MessageRef
from starquake.protocol.batch import BatchFormatError, iter_batch, pack_batch, unpack_batch
from starquake.protocol.compression import CompressionError, compress, decompress
from starquake.protocol.errors import ProtocolError
from starquake.protocol.framing import encode_entry, parse_entry
from starquake.protocol.wire import pb
from starquake.storage import Position

__all__ = ["entry_facts", "rebuild_batch"]


def _payload_size(metadata: pb.MessageMetadata, payload_len: int) -> int:
    # as Pulsar's compactor: the uncompressed size when the metadata has one
    if metadata.HasField("uncompressed_size"):
        return metadata.uncompressed_size
    return payload_len


def _uncompressed(metadata: pb.MessageMetadata, payload: memoryview) -> bytes | memoryview:
    if not metadata.compression:
        return payload
    return decompress(metadata.compression, payload, metadata.uncompressed_size)


def entry_facts(position: Position, data: bytes | memoryview) -> EntryFacts:
    """The messages of a stored entry with their keys (never raises: an entry that cannot be
    parsed comes back unreadable)."""
    try:
        parsed = parse_entry(data, verify_checksum=False, require_fields=False)
    except ProtocolError:
        return EntryFacts(position, (), readable=False)
    metadata = parsed.metadata
    if metadata.HasField("marker_type"):
        return EntryFacts(position, (), marker=True)
    batched = metadata.HasField("num_messages_in_batch") and not len(metadata.encryption_keys)
    if not batched:
        key = metadata.partition_key if metadata.HasField("partition_key") else None
        empty = metadata.null_value or _payload_size(metadata, len(parsed.payload)) <= 0
        chunked = metadata.HasField("chunk_id") and metadata.num_chunks_from_msg > 1
        message = MessageFacts(
            MessageRef(position, -1),
            key,
            empty,
            metadata.uuid if chunked else None,
            not chunked or metadata.chunk_id >= metadata.num_chunks_from_msg - 1,
        )
        return EntryFacts(position, (message,))
    count = metadata.num_messages_in_batch
    try:
        payload = _uncompressed(metadata, parsed.payload)
        messages = []
        for index, (single, body) in enumerate(iter_batch(payload, count)):
            if single.compacted_out:
                continue
            key = single.partition_key if single.HasField("partition_key") else None
            empty = single.null_value or len(body) == 0
            messages.append(MessageFacts(MessageRef(position, index), key, empty))
    except (CompressionError, BatchFormatError):
        return EntryFacts(position, (), batch_size=count, readable=False)
    return EntryFacts(position, tuple(messages), batch_size=count)


def rebuild_batch(data: bytes | memoryview, keep: Sequence[int]) -> bytes:
    """The batch entry ``data`` with only the messages at indexes ``keep`` (in order), compressed
    as before, with a new checksum."""
    parsed = parse_entry(data, verify_checksum=False, require_fields=False)
    metadata = pb.MessageMetadata()
    metadata.CopyFrom(parsed.metadata)
    payload = _uncompressed(metadata, parsed.payload)
    items = unpack_batch(payload, metadata.num_messages_in_batch)
    chosen = [(items[i][0], bytes(items[i][1])) for i in keep]
    batch = pack_batch(chosen)
    metadata.num_messages_in_batch = len(chosen)
    metadata.uncompressed_size = len(batch)
    return encode_entry(metadata, compress(metadata.compression, batch))
