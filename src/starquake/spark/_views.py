"""Byte ranges of numpy buffers copied into one Arrow binary array by Arrow itself.

A ``binary_view`` array describes each item in 16 bytes (its length, then up to 12 bytes
inline, or its first 4 bytes, the index of the buffer it lies in and its offset there) over
buffers it does not copy; cast to ``binary``, Arrow copies every item's bytes once, back to
back. Building the 16-byte views with numpy costs a few operations per item whatever its
length, where gathering the bytes with numpy index arrays costs several per byte.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["concat_ranges"]

_INLINE = 12  # items this long or shorter are held in the view itself


def concat_ranges(
    buffers: list[np.ndarray], which: np.ndarray, pos: np.ndarray, length: np.ndarray
) -> pa.Array:
    """A binary array whose item ``i`` is ``buffers[which[i]][pos[i]:pos[i] + length[i]]``
    (every buffer under 2 GiB, every position and length valid in its buffer)."""
    n = len(pos)
    views = np.zeros((n, 4), "<i4")
    views[:, 0] = length
    for index, b in enumerate(buffers):
        long = np.nonzero((length > _INLINE) & (which == index))[0]
        at = pos[long]
        views[long, 1] = (
            b[at].astype("<i4")
            | (b[at + 1].astype("<i4") << 8)
            | (b[at + 2].astype("<i4") << 16)
            | (b[at + 3].astype("<i4") << 24)
        )
        views[long, 2] = index
        views[long, 3] = at
        short = np.nonzero((length > 0) & (length <= _INLINE) & (which == index))[0]
        if short.size:
            size = length[short]
            step = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)
            inline = views.view(np.uint8).reshape(n, 16)
            inline[np.repeat(short, size), 4 + step] = b[np.repeat(pos[short], size) + step]
    data = [pa.py_buffer(b) for b in buffers]
    array = pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views), *data])
    copied: pa.Array = array.cast(pa.binary())
    return copied
