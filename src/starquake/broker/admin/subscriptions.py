"""Subscription endpoints of the admin API, under ``/admin/v2/persistent/{t}/{ns}/{topic}``.

- ``GET /subscriptions`` the names;
- ``PUT /subscription/{sub}`` create (body: an optional message id; latest by default),
  ``DELETE /subscription/{sub}`` delete (``force=true`` with consumers attached);
- ``POST /subscription/{sub}/skip/{n}``, ``/skip_all`` (clear the backlog),
  ``/expireMessages/{seconds}``, ``/resetcursor/{timestamp}`` and ``/resetcursor`` (body: a
  message id);
- ``GET /subscription/{sub}/position/{n}`` peeks at the n-th unacknowledged message and
  ``GET /ledger/{ledger}/entry/{entry}`` gets one message by id: the payload as the body and
  the metadata in ``X-Pulsar-*`` headers.

On a partitioned topic, listing, creating, deleting, clearing, expiring and resetting to a
time apply to every partition, as in Pulsar.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starquake.broker import topic_admin
from starquake.broker.admin.replies import (
    NO_CONTENT,
    SEGMENT,
    BadRequest,
    Reply,
    json_body,
    whole_number,
)
from starquake.broker.admin.routing import Route
from starquake.broker.admin.topics import TOPIC, flag, topic_of
from starquake.broker.entry_info import text_of
from starquake.broker.errors import (
    BrokerServiceError,
    SubscriptionNotFoundError,
    TopicNotFoundError,
)
from starquake.broker.resources import ConflictError
from starquake.broker.subscription import Subscription
from starquake.broker.topic import LATEST_ID, PersistentTopic
from starquake.broker.web import Call, Need, json_reply
from starquake.protocol.framing import parse_entry
from starquake.storage import Entry, Position

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

SUBSCRIPTION = TOPIC + rf"/subscription/(?P<subscription>{SEGMENT})"


def position_of(value: Any) -> Position | str:
    """A message id body: "earliest", "latest" or a position."""
    if not isinstance(value, dict):
        raise BadRequest('the body must be a message id: {"ledgerId": L, "entryId": E}')
    ledger_id, entry_id = value.get("ledgerId"), value.get("entryId")
    if not isinstance(ledger_id, int) or not isinstance(entry_id, int):
        raise BadRequest("ledgerId and entryId must be integers")
    if ledger_id < 0:
        return "earliest"
    if ledger_id >= LATEST_ID:
        return "latest"
    position = Position(ledger_id, entry_id)
    if value.get("isExcluded"):
        position = Position(ledger_id, entry_id + 1)
    return position


def entry_reply(entry: Entry, partition: int) -> Reply:
    """A stored message as Pulsar's admin API serves it: payload body, metadata headers."""
    parsed = parse_entry(entry.data, verify_checksum=False, require_fields=False)
    metadata = parsed.metadata
    headers = {
        "X-Pulsar-Message-ID": f"{entry.position.ledger_id}:{entry.position.entry_id}",
        "X-Pulsar-publish-time": _http_time(metadata.publish_time),
        "X-Pulsar-sequence-id": str(metadata.sequence_id),
        "X-Pulsar-producer-name": text_of(metadata.producer_name),
    }
    if partition >= 0:
        headers["X-Pulsar-partition-index"] = str(partition)
    for prop in metadata.properties:
        headers[f"X-Pulsar-PROPERTY-{text_of(prop.key)}"] = text_of(prop.value)
    if metadata.HasField("partition_key"):
        headers["X-Pulsar-partition-key"] = text_of(metadata.partition_key)
    if metadata.HasField("event_time") and metadata.event_time:
        headers["X-Pulsar-event-time"] = _http_time(metadata.event_time)
    if metadata.HasField("num_messages_in_batch"):
        headers["X-Pulsar-num-batch-message"] = str(metadata.num_messages_in_batch)
        headers["X-Pulsar-batch-size"] = str(len(parsed.payload))
    if metadata.compression:
        headers["X-Pulsar-compression"] = str(metadata.compression)
        headers["X-Pulsar-uncompressed-size"] = str(metadata.uncompressed_size)
    return 200, "application/octet-stream", bytes(parsed.payload), headers


def _http_time(millis: int) -> str:
    seconds = millis / 1000
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{whole}.{millis % 1000:03d}Z"


async def topics_of(
    service: BrokerService, params: dict[str, str], create: bool = False
) -> list[PersistentTopic]:
    """The topic, or every stored partition of a partitioned topic (``create``: a missing
    non-partitioned topic is created if automatic topic creation allows it)."""
    topic = topic_of(params)
    count = service.resources.partitions(topic)
    if count == 0:
        return [await topic_admin.persistent_topic(service, topic, create=create)]
    found = []
    for i in range(count):  # every partition of a partitioned topic exists
        partition = topic.partition(i)
        found.append(await topic_admin.persistent_topic(service, partition))
    return found


async def one_topic(service: BrokerService, params: dict[str, str]) -> PersistentTopic:
    """The topic the path names, loaded (a partitioned topic is refused)."""
    topic = topic_of(params)
    if service.resources.partitions(topic) > 0:
        raise BrokerServiceError(f"{topic} is a partitioned topic: name one partition")
    return await topic_admin.persistent_topic(service, topic)


async def each_subscription(
    service: BrokerService,
    params: dict[str, str],
    action: Callable[[Subscription], Awaitable[Any]],
) -> None:
    """Run ``action`` on the subscription of every partition that has it (404 if none)."""
    name = params["subscription"]
    topics = await topics_of(service, params)
    subscriptions = [t.subscriptions.get(name) for t in topics]
    if not any(isinstance(s, Subscription) for s in subscriptions):
        raise SubscriptionNotFoundError(f"Subscription {name} not found")
    for subscription in subscriptions:
        if isinstance(subscription, Subscription):
            await action(subscription)


async def list_subscriptions(service: BrokerService, call: Call) -> Reply:
    """The names of the topic's durable subscriptions."""
    names: set[str] = set()
    for topic in await topics_of(service, call.params):
        names.update(n for n, s in topic.subscriptions.items() if s.durable)
    return json_reply(200, sorted(names))


async def create(service: BrokerService, call: Call) -> Reply:
    """Create the subscription at the body's position (the end without one)."""
    name = call.params["subscription"]
    raw = json_body(call.body)
    start: Position | str = "latest" if raw is None else position_of(raw)
    topics = await topics_of(service, call.params, create=True)
    if not topics:
        raise TopicNotFoundError(f"Topic {topic_of(call.params)} not found")
    if any(name in topic.subscriptions for topic in topics):  # before creating any
        raise ConflictError(f"Subscription {name} already exists")
    for topic in topics:
        at = start
        if isinstance(start, Position) and len(topics) > 1:
            at = "latest"  # a position names a message of one partition only
        await topic_admin.create_subscription(service, topic, name, at)
    return NO_CONTENT


async def delete(service: BrokerService, call: Call) -> Reply:
    """Delete the subscription (``force``: with its consumers)."""
    force = flag(call.params, "force")
    name = call.params["subscription"]
    topics = await topics_of(service, call.params)
    if not any(name in t.subscriptions for t in topics):
        raise SubscriptionNotFoundError(f"Subscription {name} not found")
    if not force and any(
        t.subscriptions[name].consumers for t in topics if name in t.subscriptions
    ):  # refused before any partition's subscription is deleted
        raise topic_admin.PreconditionFailed(f"Subscription {name} has active consumers")
    for topic in topics:
        if name in topic.subscriptions:
            await topic_admin.delete_subscription(service, topic, name, force=force)
    return NO_CONTENT


async def skip(service: BrokerService, call: Call) -> Reply:
    """Skip ``count`` messages of the subscription."""
    count = whole_number(call.params["count"])
    topic = await one_topic(service, call.params)
    subscription = topic_admin.subscription_of(topic, call.params["subscription"])
    await topic_admin.skip(service, subscription, count)
    return NO_CONTENT


async def skip_all(service: BrokerService, call: Call) -> Reply:
    """Acknowledge every message of the subscription."""
    await each_subscription(service, call.params, lambda s: topic_admin.clear_backlog(service, s))
    return NO_CONTENT


async def expire(service: BrokerService, call: Call) -> Reply:
    """Expire the subscription's messages older than ``seconds``."""
    seconds = whole_number(call.params["seconds"])
    await each_subscription(
        service, call.params, lambda s: topic_admin.expire_messages(service, s, seconds)
    )
    return NO_CONTENT


async def reset_to_time(service: BrokerService, call: Call) -> Reply:
    """Move the subscription's cursor to the first message published at ``timestamp``."""
    timestamp = whole_number(call.params["timestamp"])

    async def reset(subscription: Subscription) -> None:
        position = await subscription.topic.find_position_by_publish_time(timestamp)
        await topic_admin.reset_cursor(service, subscription, position)

    await each_subscription(service, call.params, reset)
    return NO_CONTENT


async def reset_to_id(service: BrokerService, call: Call) -> Reply:
    """Move the subscription's cursor to the body's message id."""
    target = position_of(json_body(call.body))
    topic = await one_topic(service, call.params)
    subscription = topic_admin.subscription_of(topic, call.params["subscription"])
    if target == "earliest":
        position = topic.earliest_position()
    elif target == "latest":
        position = topic.end_position()
    else:
        assert isinstance(target, Position)
        position = target
    await topic_admin.reset_cursor(service, subscription, position)
    return NO_CONTENT


async def peek(service: BrokerService, call: Call) -> Reply:
    """The subscription's unacknowledged message at ``position``."""
    n = whole_number(call.params["position"])
    topic = await one_topic(service, call.params)
    subscription = topic_admin.subscription_of(topic, call.params["subscription"])
    entry = await topic_admin.nth_unacked_entry(subscription, n)
    return entry_reply(entry, topic.partition_index)


async def get_message(service: BrokerService, call: Call) -> Reply:
    """The message stored at ``ledger``:``entry``."""
    topic = await one_topic(service, call.params)
    position = Position(whole_number(call.params["ledger"]), whole_number(call.params["entry"]))
    entry = await topic_admin.entry_at(topic, position)
    return entry_reply(entry, topic.partition_index)


ROUTES = [
    Route("GET", TOPIC + "/subscriptions", list_subscriptions, Need.TOPIC_CONSUME),
    Route("PUT", SUBSCRIPTION, create, Need.TOPIC_CONSUME, "MessageId (optional)"),
    Route("DELETE", SUBSCRIPTION, delete, Need.TOPIC_CONSUME),
    Route("POST", SUBSCRIPTION + r"/skip/(?P<count>[^/]+)", skip, Need.TOPIC_CONSUME),
    Route("POST", SUBSCRIPTION + "/skip_all", skip_all, Need.TOPIC_CONSUME),
    Route("POST", SUBSCRIPTION + r"/expireMessages/(?P<seconds>[^/]+)", expire, Need.TOPIC_CONSUME),
    Route(
        "POST",
        SUBSCRIPTION + r"/resetcursor/(?P<timestamp>[^/]+)",
        reset_to_time,
        Need.TOPIC_CONSUME,
    ),
    Route("POST", SUBSCRIPTION + "/resetcursor", reset_to_id, Need.TOPIC_CONSUME, "MessageId"),
    Route("GET", SUBSCRIPTION + r"/position/(?P<position>[^/]+)", peek, Need.TOPIC_CONSUME),
    Route(
        "GET",
        TOPIC + r"/ledger/(?P<ledger>[^/]+)/entry/(?P<entry>[^/]+)",
        get_message,
        Need.TOPIC_CONSUME,
    ),
]
"""The endpoints of subscriptions."""

__all__ = ["ROUTES", "SUBSCRIPTION"]
