"""A broker-side deduplication state to drive directly in tests, recovered over no stored data."""

from __future__ import annotations

from starquake.broker.dedup import MessageDeduplication
from starquake.storage import Position, read_now


class EmptyLedger:
    """Just enough of a ManagedLedger with nothing stored."""

    last_confirmed = Position(0, -1)

    def first_position(self) -> Position | None:
        return None


def ready_dedup(topic: str, **kwargs: int) -> MessageDeduplication:
    """An enabled deduplication of ``topic``, recovered over an empty ledger (``kwargs`` go to
    :class:`MessageDeduplication`)."""
    dedup = MessageDeduplication(topic, enabled=True, **kwargs)
    read_now(dedup.recover(None, EmptyLedger()))  # type: ignore[arg-type]
    return dedup
