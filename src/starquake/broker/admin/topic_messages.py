"""Topic endpoints about a topic's messages, with Pulsar's paths under
``/admin/v2/persistent/{tenant}/{namespace}/{topic}``:

- ``DELETE /truncate``: every subscription moves to the end and the data nothing reads any
  more is deleted, retention notwithstanding (every partition of a partitioned topic); 204;
- ``POST /all_subscription/expireMessages/{seconds}``: every subscription acknowledges the
  messages published more than that long ago (every partition); 204;
- ``GET /messageid/{timestamp}``: the id of the first message published at or after the
  timestamp (ms), ``{"ledgerId", "entryId", "partitionIndex"}``; 404 when there is none;
- ``GET /examinemessage?initialPosition=earliest|latest&messagePosition=N``: the N-th message
  from the earliest or back from the latest (1: the first or the last), as a peek answers it:
  the payload as the body, the metadata in ``X-Pulsar-*`` headers;
- ``GET /partitioned-internalStats``: ``{"metadata": {"partitions": N}, "partitions":
  {partition: internal stats}}``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starquake.broker import topic_admin, topic_stats
from starquake.broker.admin.replies import (
    NO_CONTENT,
    BadRequest,
    Reply,
    whole_number,
)
from starquake.broker.admin.routing import Route
from starquake.broker.admin.subscriptions import entry_reply
from starquake.broker.admin.topics import TOPIC, message_id, topic_of
from starquake.broker.errors import TopicNotFoundError
from starquake.broker.topic import PersistentTopic
from starquake.broker.web import Call, Need, json_reply

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService


async def every_partition(service: BrokerService, params: dict[str, str]) -> list[PersistentTopic]:
    """The topic, or each partition of a partitioned topic, loaded."""
    topic = topic_of(params)
    count = service.resources.partitions(topic)
    names = [topic.partition(i) for i in range(count)] if count else [topic]
    return [await topic_admin.persistent_topic(service, name) for name in names]


async def one_topic(service: BrokerService, params: dict[str, str]) -> PersistentTopic:
    """The topic the path names, loaded (a partitioned topic is refused)."""
    topic = topic_of(params)
    if service.resources.partitions(topic) > 0:
        raise BadRequest(f"{topic} is a partitioned topic: name one partition")
    return await topic_admin.persistent_topic(service, topic)


async def truncate(service: BrokerService, call: Call) -> Reply:
    """Delete the topic's stored messages no subscription needs (each partition)."""
    for topic in await every_partition(service, call.params):
        await topic_admin.truncate(service, topic)
    return NO_CONTENT


async def expire_all(service: BrokerService, call: Call) -> Reply:
    """Expire every subscription's messages older than ``seconds``."""
    seconds = whole_number(call.params["seconds"], "expireTimeInSeconds")
    for topic in await every_partition(service, call.params):
        await topic_admin.expire_all_subscriptions(service, topic, seconds)
    return NO_CONTENT


async def message_id_at(service: BrokerService, call: Call) -> Reply:
    """The id of the first message published at or after ``timestamp``."""
    timestamp = whole_number(call.params["timestamp"], "timestamp")
    topic = await one_topic(service, call.params)
    position = await topic.find_position_by_publish_time(timestamp)
    if position > topic.ledger.last_confirmed:
        raise TopicNotFoundError(f"No message published at or after {timestamp} in {topic}")
    return json_reply(200, message_id(position, topic.partition_index))


async def examine(service: BrokerService, call: Call) -> Reply:
    """The message at ``messagePosition`` from the earliest or latest one."""
    initial = call.params.get("initialPosition", "latest").lower()
    if initial not in ("earliest", "latest"):
        raise BadRequest(f"initialPosition must be earliest or latest, not {initial!r}")
    n = whole_number(call.params.get("messagePosition", "1"), "messagePosition")
    topic = await one_topic(service, call.params)
    entry = await topic_admin.examined_entry(topic, initial, n)
    return entry_reply(entry, topic.partition_index)


async def partitioned_internal_stats(service: BrokerService, call: Call) -> Reply:
    """Each partition's internal (storage) stats."""
    topic = topic_of(call.params)
    count = service.resources.partitions(topic)
    if count == 0:
        raise TopicNotFoundError(f"Partitioned topic {topic} not found")
    partitions: dict[str, Any] = {}
    for i in range(count):
        loaded = await topic_admin.persistent_topic(service, topic.partition(i))
        partitions[str(topic.partition(i))] = topic_stats.internal_stats(loaded)
    return json_reply(200, {"metadata": {"partitions": count}, "partitions": partitions})


ROUTES = [
    Route("DELETE", TOPIC + "/truncate", truncate, Need.TOPIC_ADMIN),
    Route(
        "POST",
        TOPIC + r"/all_subscription/expireMessages/(?P<seconds>[^/]+)",
        expire_all,
        Need.TOPIC_ADMIN,
    ),
    Route("GET", TOPIC + r"/messageid/(?P<timestamp>[^/]+)", message_id_at, Need.TOPIC_ADMIN),
    Route("GET", TOPIC + "/examinemessage", examine, Need.TOPIC_ADMIN),
    Route(
        "GET", TOPIC + "/partitioned-internalStats", partitioned_internal_stats, Need.TOPIC_LOOKUP
    ),
]
"""The endpoints of a topic's messages."""
