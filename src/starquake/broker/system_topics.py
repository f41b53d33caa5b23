"""System topics: the names Pulsar reserves for its own use.

Pulsar keeps internal state in topics of reserved names (its ``SystemTopicNames``): per namespace
``__change_events`` (topic-policy events), ``__transaction_buffer_snapshot`` and its
``_segments`` / ``_indexes`` companions; a topic's ``<name>__transaction_pending_ack``; and in the
system namespace ``pulsar/system`` the transaction coordinator's ``transaction_coordinator_assign``
and ``__transaction_log_`` topics. A partition of such a topic is a system topic too.

Starquake keeps most of that state in its metadata store instead; only the transaction
coordinator's topics exist, created by the broker when ``transactionCoordinatorEnabled`` is on.
Users may not create one (the admin API answers 400 "Cannot create topic in system topic
format!", as Pulsar does for the transaction topics; a producer or consumer that would
auto-create one gets NotAllowed), and topic listings leave them out unless the admin list is
asked ``includeSystemTopic=true``.
"""

from __future__ import annotations

from starquake.broker.errors import NotAllowedError
from starquake.common.topic_name import InvalidTopicNameError, TopicName

__all__ = [
    "CREATE_REFUSED",
    "EVENT_TOPIC_NAMES",
    "SYSTEM_NAMESPACE",
    "check_creatable",
    "hide_system_topics",
    "is_system_topic",
]

NAMESPACE_EVENTS = "__change_events"
EVENT_TOPIC_NAMES = frozenset(
    {
        NAMESPACE_EVENTS,
        "__transaction_buffer_snapshot",
        "__transaction_buffer_snapshot_segments",
        "__transaction_buffer_snapshot_indexes",
    }
)
PENDING_ACK_SUFFIX = "__transaction_pending_ack"
SYSTEM_NAMESPACE = "pulsar/system"
_COORDINATOR_PREFIXES = ("transaction_coordinator_assign", "__transaction_log_")
CREATE_REFUSED = "Cannot create topic in system topic format!"


def is_system_topic(topic: TopicName) -> bool:
    """Whether ``topic`` (or the partitioned topic it is a partition of) is a system topic."""
    base = topic.partitioned_topic_name.local_name
    if base in EVENT_TOPIC_NAMES or base.endswith(PENDING_ACK_SUFFIX):
        return True
    return topic.namespace_name == SYSTEM_NAMESPACE and base.startswith(_COORDINATOR_PREFIXES)


def _is_system_name(name: str) -> bool:
    try:
        return is_system_topic(TopicName.parse(name))
    except InvalidTopicNameError:
        return False


def hide_system_topics(names: list[str]) -> list[str]:
    """``names`` without the system topics, in the same order."""
    return [name for name in names if not _is_system_name(name)]


def check_creatable(topic: TopicName) -> None:
    """Refuse creating a system topic on a client's behalf (NotAllowedError)."""
    if is_system_topic(topic):
        raise NotAllowedError(f"Cannot create system topic {topic}: the name is reserved")
