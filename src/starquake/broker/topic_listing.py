"""Which topics a namespace has: the lists GET_TOPICS_OF_NAMESPACE and the admin API return."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from starquake.common.topic_name import InvalidTopicNameError, TopicName

if TYPE_CHECKING:
    from starquake.broker.nonpersistent import NonPersistentTopic
    from starquake.broker.resources import PulsarResources


def non_persistent_topics(topics: Mapping[str, NonPersistentTopic], namespace: str) -> list[str]:
    """The known non-persistent topics of ``namespace``, sorted."""
    return sorted(name for name, t in topics.items() if t.name.namespace_name == namespace)


def partitioned_counts(resources: PulsarResources, namespace: str) -> list[tuple[TopicName, int]]:
    """The persistent partitioned topics of ``namespace`` and their partition counts."""
    out = []
    for base in resources.partitioned_topics(namespace):
        parsed = TopicName.parse(base)
        if parsed.is_persistent:
            out.append((parsed, resources.partitions(parsed)))
    return out


def persistent_topics(
    stored_names: Iterable[str], partitioned: Iterable[tuple[TopicName, int]], namespace: str
) -> list[str]:
    """The persistent topics of ``namespace``, sorted: those with a ledger (``stored_names``)
    and every partition of its partitioned topics (``partitioned``: each with its count), as
    ``<name>-partition-<i>``."""
    names: set[str] = set()
    for name in stored_names:
        try:
            parsed = TopicName.parse(name)
        except InvalidTopicNameError:
            continue
        if parsed.namespace_name == namespace and parsed.is_persistent:
            names.add(name)
    for parsed, count in partitioned:
        names.update(str(parsed.partition(i)) for i in range(count))
    return sorted(names)


def filter_topics(topics: Iterable[str], pattern: str) -> list[str]:
    """Topics whose name matches ``pattern`` (the domain prefix is optional in patterns)."""
    regex = re.compile(pattern)
    return [
        topic
        for topic in topics
        if regex.fullmatch(topic) or regex.fullmatch(topic.split("://", 1)[-1])
    ]
