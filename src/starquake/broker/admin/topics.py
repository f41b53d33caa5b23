"""Topic endpoints of the admin API, under ``/admin/v2/{persistent|non-persistent}/{t}/{ns}``.

- ``GET {ns}`` the topics (partitions by partition name; ``includeSystemTopic`` adds the
  system topics), ``GET {ns}/partitioned`` the partitioned topics;
- ``PUT|DELETE {ns}/{topic}`` create or delete a non-partitioned topic (``force=true``
  deletes one with clients attached), ``DELETE {ns}/{topic}/partitions`` a partitioned one;
- ``GET {topic}/stats`` (``getEarliestTimeInBacklog``: the publish time of each
  subscription's first unacknowledged message), ``/internalStats``, ``/partitioned-stats``
  (``perPartition``), ``/lastMessageId``; ``POST {topic}/terminate``; ``PUT {topic}/unload``;
- ``GET {topic}/entryCounts?ledgerId=&entryId=&maxMessages=&maxEntries=`` the rows of each
  stored entry from a position on, without payloads (a Starquake extension, see
  :mod:`starquake.broker.entry_counts`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from starquake.broker import topic_admin, topic_stats
from starquake.broker.admin.replies import (
    NO_CONTENT,
    SEGMENT,
    BadRequest,
    Reply,
    whole_number,
)
from starquake.broker.admin.routing import Route
from starquake.broker.entry_counts import MAX_ENTRIES, entry_counts
from starquake.broker.errors import TopicNotFoundError
from starquake.broker.subscription import Subscription
from starquake.broker.system_topics import CREATE_REFUSED, hide_system_topics, is_system_topic
from starquake.broker.topic import PersistentTopic
from starquake.broker.web import Call, Need, json_reply
from starquake.common.topic_name import TopicName

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

log = logging.getLogger(__name__)

NAMESPACE = (
    rf"/admin/v2/(?P<domain>persistent|non-persistent)/(?P<tenant>{SEGMENT})"
    rf"/(?P<namespace>{SEGMENT})"
)
TOPIC = NAMESPACE + rf"/(?P<topic>{SEGMENT})"


def topic_of(params: dict[str, str]) -> TopicName:
    """The topic a path names (InvalidTopicNameError if it is not a valid name)."""
    return TopicName.parse(
        f"{params['domain']}://{params['tenant']}/{params['namespace']}/{params['topic']}"
    )


def flag(params: dict[str, str], name: str, default: bool = False) -> bool:
    """A boolean query parameter (``true`` in any case is True)."""
    value = params.get(name)
    return default if value is None else value.lower() == "true"


def message_id(position: Any, partition: int, batch_index: int = -1) -> dict[str, int]:
    """A message id as Pulsar's admin API writes it."""
    out = {
        "ledgerId": position.ledger_id,
        "entryId": position.entry_id,
        "partitionIndex": partition,
    }
    if batch_index >= 0:
        out["batchIndex"] = batch_index
    return out


async def partition_stats(service: BrokerService, topic: TopicName) -> dict[str, Any] | None:
    """Stats of one topic (None for a non-persistent partition no client has used)."""
    try:
        loaded = await topic_admin.existing_topic(service, topic)
    except TopicNotFoundError:
        return None
    return loaded.stats()


def merge_stats(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One TopicStats summing the partitions' (rates, counters, backlogs; lists joined; for the
    subscriptions' times, the latest)."""
    summed = (
        "msgRateIn",
        "msgThroughputIn",
        "msgRateOut",
        "msgThroughputOut",
        "bytesInCounter",
        "msgInCounter",
        "bytesOutCounter",
        "msgOutCounter",
        "storageSize",
        "backlogSize",
    )
    out: dict[str, Any] = {key: sum(p.get(key, 0) for p in parts) for key in summed}
    rate = out["msgRateIn"]
    out["averageMsgSize"] = out["msgThroughputIn"] / rate if rate else 0.0
    out["publishers"] = [pub for p in parts for pub in p.get("publishers", [])]
    subscriptions: dict[str, Any] = {}
    for part in parts:
        for name, sub in part.get("subscriptions", {}).items():
            merged = subscriptions.get(name)
            if merged is None:
                subscriptions[name] = {**sub, "consumers": list(sub.get("consumers", []))}
                continue
            for key, value in sub.items():
                if key == "consumers":
                    merged["consumers"].extend(value)
                elif key.endswith("Timestamp"):  # the latest of the partitions'
                    merged[key] = max(merged.get(key, 0), value)
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    merged[key] = merged.get(key, 0) + value
    out["subscriptions"] = subscriptions
    out["replication"] = {}
    return out


async def list_topics(service: BrokerService, call: Call) -> Reply:
    """The namespace's topics of the path's domain."""
    namespace = f"{call.params['tenant']}/{call.params['namespace']}"
    if not service.resources.namespace_exists(namespace):
        raise TopicNotFoundError(f"Namespace {namespace} does not exist")
    persistent = call.params["domain"] == "persistent"
    names = await service.list_topics(namespace, persistent=persistent)
    if not flag(call.params, "includeSystemTopic"):
        names = hide_system_topics(names)
    return json_reply(200, names)


async def list_partitioned(service: BrokerService, call: Call) -> Reply:
    """The namespace's partitioned topics of the path's domain."""
    namespace = f"{call.params['tenant']}/{call.params['namespace']}"
    if not service.resources.namespace_exists(namespace):
        raise TopicNotFoundError(f"Namespace {namespace} does not exist")
    prefix = f"{call.params['domain']}://"
    names = [n for n in service.resources.partitioned_topics(namespace) if n.startswith(prefix)]
    if not flag(call.params, "includeSystemTopic"):
        names = hide_system_topics(names)
    return json_reply(200, sorted(names))


async def create(service: BrokerService, call: Call) -> Reply:
    """Create a non-partitioned topic."""
    topic = topic_of(call.params)
    if is_system_topic(topic):
        raise BadRequest(CREATE_REFUSED)
    await topic_admin.create_topic(service, topic)
    return NO_CONTENT


async def delete(service: BrokerService, call: Call) -> Reply:
    """Delete a non-partitioned topic (``force``: with its clients)."""
    await topic_admin.delete_topic(service, topic_of(call.params), force=flag(call.params, "force"))
    return NO_CONTENT


async def delete_partitioned(service: BrokerService, call: Call) -> Reply:
    """Delete a partitioned topic and its partitions."""
    await topic_admin.delete_partitioned_topic(
        service, topic_of(call.params), force=flag(call.params, "force")
    )
    return NO_CONTENT


async def stats(service: BrokerService, call: Call) -> Reply:
    """The topic's stats."""
    topic = topic_of(call.params)
    if service.resources.partitions(topic) > 0:
        raise TopicNotFoundError(f"{topic} is a partitioned topic: ask for its partitioned-stats")
    loaded = await topic_admin.existing_topic(service, topic)
    out = loaded.stats()
    if flag(call.params, "getEarliestTimeInBacklog") and isinstance(loaded, PersistentTopic):
        times = []
        for name, sub_stats in out["subscriptions"].items():
            subscription = loaded.subscriptions.get(name)
            if isinstance(subscription, Subscription):
                found = await topic_admin.earliest_publish_time_in_backlog(subscription)
                sub_stats["earliestMsgPublishTimeInBacklog"] = found
                times += [found] if found else []
        out["earliestMsgPublishTimeInBacklogs"] = min(times, default=0)
    return json_reply(200, out)


async def internal_stats(service: BrokerService, call: Call) -> Reply:
    """The topic's internal (storage) stats."""
    loaded = await topic_admin.persistent_topic(service, topic_of(call.params))
    return json_reply(200, topic_stats.internal_stats(loaded))


async def partitioned_stats(service: BrokerService, call: Call) -> Reply:
    """A partitioned topic's stats, summed (``perPartition``: each too)."""
    topic = topic_of(call.params)
    count = service.resources.partitions(topic)
    if count == 0:
        raise TopicNotFoundError(f"Partitioned topic {topic} not found")
    per_partition: dict[str, Any] = {}
    for i in range(count):
        partition = topic.partition(i)
        found = await partition_stats(service, partition)
        if found is not None:
            per_partition[str(partition)] = found
    out = merge_stats(list(per_partition.values()))
    out["metadata"] = {"partitions": count}
    if flag(call.params, "perPartition", default=True):
        out["partitions"] = per_partition
    return json_reply(200, out)


async def last_message_id(service: BrokerService, call: Call) -> Reply:
    """The id of the topic's last message."""
    loaded = await topic_admin.persistent_topic(service, topic_of(call.params))
    last, batch_index = await loaded.last_message_position()
    return json_reply(200, message_id(last, loaded.partition_index, batch_index))


async def counts(service: BrokerService, call: Call) -> Reply:
    """The rows of each stored entry from a position on (without payloads)."""
    start = (
        whole_number(call.params.get("ledgerId", "0"), "ledgerId"),
        whole_number(call.params.get("entryId", "0"), "entryId"),
    )
    max_messages = whole_number(call.params.get("maxMessages", str(1 << 62)), "maxMessages", 1)
    max_entries = whole_number(call.params.get("maxEntries", str(MAX_ENTRIES)), "maxEntries", 1)
    loaded = await topic_admin.persistent_topic(service, topic_of(call.params))
    found = await entry_counts(loaded, start, max_messages, max_entries)
    return json_reply(200, {"entries": found})


async def terminate(service: BrokerService, call: Call) -> Reply:
    """Terminate the topic: no more messages may be published."""
    topic = topic_of(call.params)
    if service.resources.partitions(topic) > 0:
        return json_reply(405, {"reason": "Termination of a partitioned topic is not allowed"})
    last = await topic_admin.terminate(service, topic)
    return json_reply(200, message_id(last, topic.partition_index))


async def unload(service: BrokerService, call: Call) -> Reply:
    """Unload the topic (each partition); its clients reconnect."""
    topic = topic_of(call.params)
    count = service.resources.partitions(topic)
    names = [topic.partition(i) for i in range(count)] if count else [topic]
    if not count:
        await topic_admin.existing_topic(service, topic)  # 404 for an unknown topic
    for name in names:
        loaded = service.loaded_topic(name)
        if isinstance(loaded, PersistentTopic):
            service.unload_topic(loaded)
    return NO_CONTENT


ROUTES = [
    Route("GET", NAMESPACE, list_topics, Need.LIST_TOPICS),
    Route("GET", NAMESPACE + "/partitioned", list_partitioned, Need.LIST_TOPICS),
    Route("PUT", TOPIC, create, Need.TOPIC_ADMIN),
    Route("DELETE", TOPIC, delete, Need.TOPIC_ADMIN),
    Route("DELETE", TOPIC + "/partitions", delete_partitioned, Need.TOPIC_ADMIN),
    Route("GET", TOPIC + "/stats", stats, Need.TOPIC_LOOKUP),
    Route("GET", TOPIC + "/internalStats", internal_stats, Need.TOPIC_LOOKUP),
    Route("GET", TOPIC + "/partitioned-stats", partitioned_stats, Need.TOPIC_LOOKUP),
    Route("GET", TOPIC + "/lastMessageId", last_message_id, Need.TOPIC_CONSUME),
    Route("GET", TOPIC + "/entryCounts", counts, Need.TOPIC_CONSUME),
    Route("POST", TOPIC + "/terminate", terminate, Need.TOPIC_ADMIN),
    Route("PUT", TOPIC + "/unload", unload, Need.TOPIC_ADMIN),
]
"""The endpoints of topics."""
