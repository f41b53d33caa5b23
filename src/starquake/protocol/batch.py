"""Batch payloads: several messages carried in one entry.

A batched message (``MessageMetadata.num_messages_in_batch`` present) has, as its uncompressed
payload, ``num_messages_in_batch`` entries back to back::

    [metadataSize u32 BE][SingleMessageMetadata (metadataSize bytes)][payload (payload_size bytes)]
    [metadataSize u32 BE][SingleMessageMetadata][payload]
    ...

``SingleMessageMetadata.payload_size`` (required) gives each entry's payload length. There is
no padding and nothing after the last entry. An entry's position in the list is its
``batch_index``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

from google.protobuf.message import DecodeError

from starquake.protocol._generated import starquake_wire_pb2 as pb

__all__ = ["BatchFormatError", "DecodeError", "iter_batch", "pack_batch", "unpack_batch"]

_U32 = struct.Struct(">I")


class BatchFormatError(ValueError):
    """A batch payload does not match its layout or its declared message count."""


def pack_batch(entries: Sequence[tuple[pb.SingleMessageMetadata, bytes]]) -> bytes:
    """Concatenate ``(metadata, payload)`` pairs into an uncompressed batch payload.

    Each metadata's ``payload_size`` is set to ``len(payload)`` (the message is updated in
    place), so callers need not fill it in.
    """
    pack_u32 = _U32.pack
    parts: list[bytes] = []
    append = parts.append
    for meta, payload in entries:
        meta.payload_size = len(payload)
        encoded = meta.SerializeToString()
        append(pack_u32(len(encoded)))
        append(encoded)
        append(payload)
    return b"".join(parts)


def iter_batch(
    payload: bytes | bytearray | memoryview, num_messages: int
) -> Iterator[tuple[pb.SingleMessageMetadata, memoryview]]:
    """Yield ``(metadata, payload view)`` for each entry of a batch, lazily.

    The views point into ``payload`` (no copies). Raises :class:`BatchFormatError` when an
    entry overruns the buffer, a metadata does not parse, or the buffer holds more or fewer
    than ``num_messages`` entries; entries before the fault have already been yielded.
    """
    if num_messages < 0:
        raise BatchFormatError(f"negative message count {num_messages}")
    view = memoryview(payload)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    end = len(view)
    unpack_u32 = _U32.unpack_from
    offset = 0
    for index in range(num_messages):
        if end - offset < 4:
            raise BatchFormatError(
                f"batch entry {index}: no metadata size at offset {offset} "
                f"(payload is {end} bytes, {num_messages} messages expected)"
            )
        (meta_size,) = unpack_u32(view, offset)
        offset += 4
        meta_end = offset + meta_size
        if meta_end > end:
            raise BatchFormatError(
                f"batch entry {index}: metadata of {meta_size} bytes overruns the payload "
                f"({end - offset} bytes left)"
            )
        meta = pb.SingleMessageMetadata()
        try:
            meta.ParseFromString(bytes(view[offset:meta_end]))
        except DecodeError as exc:
            raise BatchFormatError(
                f"batch entry {index}: bad SingleMessageMetadata: {exc}"
            ) from None
        if not meta.HasField("payload_size"):
            raise BatchFormatError(f"batch entry {index}: SingleMessageMetadata lacks payload_size")
        size = meta.payload_size
        payload_end = meta_end + size
        if size < 0 or payload_end > end:
            raise BatchFormatError(
                f"batch entry {index}: payload_size {size} does not fit "
                f"({end - meta_end} bytes left)"
            )
        yield meta, view[meta_end:payload_end]
        offset = payload_end
    if offset != end:
        raise BatchFormatError(
            f"{end - offset} bytes left after {num_messages} batch entries: the message count "
            "is wrong or the payload is corrupt"
        )


def unpack_batch(
    payload: bytes | bytearray | memoryview, num_messages: int
) -> list[tuple[pb.SingleMessageMetadata, memoryview]]:
    """Split a batch payload into ``(metadata, payload view)`` pairs, validating all of it.

    Raises :class:`BatchFormatError` if the layout is broken or the entry count differs from
    ``num_messages``.
    """
    return list(iter_batch(payload, num_messages))
