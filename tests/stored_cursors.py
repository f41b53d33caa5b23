"""What a broker has committed to disk about its subscriptions, read while it runs.

Tests that kill a broker and expect acknowledgments to survive wait on this instead of sleeping
past the client's ack grouping delay and the broker's cursor flush interval.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote

from polling import wait_for

from starquake.storage import Position
from starquake.storage.cursor import decode_cursor_state


def _stored_values(data_dir: Path, key_suffix: str) -> list[bytes]:
    path = data_dir / "metadata.db"
    if not path.exists():
        return []
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT key, value FROM kv").fetchall()
    return [bytes(value) for key, value in rows if str(key).endswith(key_suffix)]


def stored_acknowledged(
    data_dir: Path, subscription: str, positions: Iterable[tuple[int, int]]
) -> bool:
    """Whether the stored state of ``subscription`` (of the only topic with a subscription of
    that name) counts every one of ``positions`` as acknowledged."""
    values = _stored_values(data_dir, "/" + quote(subscription, safe=""))
    if len(values) != 1:
        return False
    mark_delete, acked, _ = decode_cursor_state(values[0])
    return all(Position(*p) <= mark_delete or Position(*p) in acked for p in positions)


def wait_acknowledgments_stored(
    data_dir: Path, subscription: str, positions: Iterable[tuple[int, int]]
) -> None:
    """Fail unless the broker stores ``positions`` as acknowledged within 20 seconds."""
    wanted = list(positions)
    wait_for(
        lambda: stored_acknowledged(data_dir, subscription, wanted),
        f"{len(wanted)} acknowledgments of {subscription!r} stored on disk",
    )


def subscription_stored(data_dir: Path, subscription: str) -> bool:
    """Whether a durable subscription named ``subscription`` is stored on disk."""
    return len(_stored_values(data_dir, "/" + quote(subscription, safe=""))) == 1
