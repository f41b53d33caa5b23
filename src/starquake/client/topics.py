"""Topic names and partition routing, for code built on the client (such as the Spark source).

Names follow Pulsar: ``my-topic`` is ``persistent://public/default/my-topic``; partition ``i``
of a partitioned topic is ``<name>-partition-<i>``.
"""

from __future__ import annotations

import functools

from starquake.common.hashes import boost_hash
from starquake.common.topic_name import InvalidTopicNameError, TopicName

__all__ = [
    "InvalidTopicNameError",
    "base_topic",
    "namespace_of",
    "normalize_topic",
    "partition_for_key",
    "partition_name",
]


def normalize_topic(name: str) -> str:
    """The fully qualified name (raises :class:`InvalidTopicNameError` if malformed)."""
    return str(TopicName.parse(name))


def partition_name(topic: str, index: int) -> str:
    """The name of partition ``index`` of ``topic``."""
    return str(TopicName.parse(topic).partition(index))


def base_topic(name: str) -> str:
    """The partitioned topic a partition belongs to (a non-partition name is returned as is)."""
    parsed = TopicName.parse(name)
    return str(parsed.partitioned_topic_name) if parsed.is_partition else str(parsed)


def namespace_of(name: str) -> str:
    """``tenant/namespace`` of a topic."""
    return TopicName.parse(name).namespace_name


def partition_for_key(key: str, num_partitions: int) -> int:
    """The partition a keyed message goes to, as the client's producers (and the official
    Python client) route it by default."""
    return _key_hash(key) % num_partitions


_key_hash = functools.lru_cache(maxsize=65536)(boost_hash)
