"""The durable subscriptions that hold the transaction logs (a coordinator's, a subscription's
pending acks) and the naming of pending-ack logs."""

from __future__ import annotations

from starquake.broker.subscription import Subscription
from starquake.broker.topic import PersistentTopic
from starquake.broker.transactions.pending_ack import PENDING_ACK_SUFFIX
from starquake.storage import ManagedCursor

LOG_CURSOR = "__txn_coordinator"
"""The durable cursor of a transaction log: it moves past the records of ended transactions
(keeping the last record), so a restart replays only what follows it and trimming may delete
what precedes it."""


PENDING_ACK_CURSOR = "__pending_ack_store"
"""The same for a pending-ack log: it moves past the records of transactions aborted, or
committed and applied to the subscription's stored cursor."""


def hold_log(topic: PersistentTopic, name: str) -> ManagedCursor:
    """Give a log topic its durable subscription (it holds the log's records from trimming
    until it moves past them); returns its cursor."""
    if name not in topic.subscriptions:
        cursor = topic.ledger.open_cursor(name, "earliest")
        topic.subscriptions[name] = Subscription(topic, name, cursor, durable=True)
    return topic.subscriptions[name].cursor


def subscriptions_of_logs(topic: str, stored: list[str]) -> list[str]:
    """The subscriptions of ``topic`` whose pending-ack logs are among ``stored``."""
    prefix = f"{topic}-"
    suffix = PENDING_ACK_SUFFIX
    longer = [n for n in stored if n.startswith(prefix) and not n.endswith(suffix)]
    found = []
    for name in stored:
        if not (name.startswith(prefix) and name.endswith(suffix)):
            continue
        if any(name.startswith(f"{other}-") for other in longer):
            continue  # the log of a subscription of that other topic
        found.append(name[len(prefix) : -len(suffix)])
    return found
