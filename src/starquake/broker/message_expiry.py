"""Message expiry: moving a subscription past the messages older than a time to live."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from starquake.storage import Position

if TYPE_CHECKING:
    from starquake.broker.subscription import Subscription

__all__ = ["cursor_moved", "expire_older_than"]


async def expire_older_than(subscription: Subscription, seconds: int) -> bool:
    """Acknowledge the messages published more than ``seconds`` ago (the cursor is stored
    with the next periodic flush); True if the cursor moved. Nothing moves if the
    subscription was deleted, the topic closed or a reset began while the search read."""
    topic = subscription.topic
    cutoff_ms = int(time.time() * 1000) - seconds * 1000
    first_kept = await topic.find_position_by_publish_time(cutoff_ms)
    if (
        topic.closed
        or subscription.fenced
        or topic.subscriptions.get(subscription.name) is not subscription
    ):
        return False  # closed, being reset or deleted while the read waited
    before = Position(first_kept.ledger_id, first_kept.entry_id - 1)
    last = topic.ledger.last_confirmed
    if before > last:
        before = last
    cursor = subscription.cursor
    if before > cursor.mark_delete_position:
        expired = cursor.backlog()
        cursor.mark_delete(before)
        subscription.expired_counter += max(expired - cursor.backlog(), 0)
        subscription.last_expire_timestamp = int(time.time() * 1000)
        cursor_moved(subscription)
        return True
    return False


def cursor_moved(subscription: Subscription) -> None:
    """The cursor moved forward under the dispatcher: wake it (entries may be freed)."""
    dispatcher = subscription.dispatcher
    if dispatcher is not None:
        dispatcher.schedule()
