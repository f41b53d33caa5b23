"""Partitioned-topic endpoints of the admin API served so far.

``PUT /admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}/partitions`` with the
partition count as its JSON body creates a partitioned topic (409 if it exists), ``POST`` on
the same path raises the count (it can only grow), ``GET`` answers ``{"partitions": N}``
(0 for a topic that is not partitioned), as Pulsar's admin API does.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from starquake.broker.admin.replies import (
    NO_CONTENT,
    BadRequest,
    Reply,
    parse_json,
    partition_count_refusal,
    status_of,
)
from starquake.broker.admin.routing import Route
from starquake.broker.errors import BrokerServiceError
from starquake.broker.system_topics import CREATE_REFUSED, is_system_topic
from starquake.broker.web import Call, Need, json_reply
from starquake.common.topic_name import InvalidTopicNameError, TopicName

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

log = logging.getLogger(__name__)

_TOPIC = (
    r"/admin/v2/(?P<domain>persistent|non-persistent)/(?P<tenant>[^/]+)/(?P<namespace>[^/]+)"
    r"/(?P<topic>[^/]+)"
)


def topic_of(params: dict[str, str]) -> TopicName:
    """The topic the path names (InvalidTopicNameError otherwise)."""
    return TopicName.parse(
        f"{params['domain']}://{params['tenant']}/{params['namespace']}/{params['topic']}"
    )


def count_of(body: bytes) -> int | None:
    """The partition count of a body (None when it is not a whole number)."""
    try:
        value = parse_json(body or b"null")
    except BadRequest:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


async def change(service: BrokerService, call: Call, *, create: bool) -> Reply:
    """Create a partitioned topic, or raise its partition count."""
    try:
        topic = topic_of(call.params)
    except InvalidTopicNameError as exc:
        return json_reply(412, {"reason": str(exc)})
    if create and is_system_topic(topic):
        return json_reply(400, {"reason": CREATE_REFUSED})
    count = count_of(call.body)
    if count is None:
        return json_reply(400, {"reason": "the body must be the number of partitions"})
    # Pulsar answers 406 Not Acceptable, creating or updating
    refusal = partition_count_refusal(count, service.config.partition_limit)
    if refusal is not None:
        return json_reply(406, {"reason": str(refusal)})
    resources = service.resources
    if create and resources.partitions(topic) == 0 and service.topic_exists(topic):
        # a non-partitioned topic of that name (as Pulsar answers)
        return json_reply(409, {"reason": "This topic already exists"})
    store = resources.create_partitioned_topic if create else resources.update_partitioned_topic
    try:
        await asyncio.to_thread(store, topic, count)
    except (BrokerServiceError, ValueError) as exc:
        return json_reply(status_of(exc), {"reason": str(exc)})
    log.info("partitioned topic %s: %d partitions", topic, count)
    return NO_CONTENT


async def create(service: BrokerService, call: Call) -> Reply:
    """Create a partitioned topic with the body's partition count."""
    return await change(service, call, create=True)


async def update(service: BrokerService, call: Call) -> Reply:
    """Raise a partitioned topic's partition count to the body's."""
    return await change(service, call, create=False)


async def get(service: BrokerService, call: Call) -> Reply:
    """``{"partitions": N}`` (0: not partitioned), auto-creating when the lookup asks."""
    try:
        topic = topic_of(call.params)
        partitions = service.partitioned_metadata(topic)
        # a client's HTTP lookup asks this way, and gets the topic auto-created as the
        # binary lookup would
        auto = call.params.get("checkAllowAutoCreation", "").lower() == "true"
        if partitions == 0 and auto and service.wants_auto_partitioned(topic):
            partitions = await service.create_auto_partitioned(topic)
    except InvalidTopicNameError as exc:
        return json_reply(412, {"reason": str(exc)})
    except BrokerServiceError as exc:
        return json_reply(status_of(exc), {"reason": str(exc)})
    return json_reply(200, {"partitions": partitions})


_PARTITIONS = _TOPIC + "/partitions"

ROUTES = [
    Route("PUT", _PARTITIONS, create, Need.TOPIC_ADMIN, "the number of partitions"),
    Route("POST", _PARTITIONS, update, Need.TOPIC_ADMIN, "the number of partitions"),
    Route("GET", _PARTITIONS, get, Need.TOPIC_LOOKUP),
]
"""The endpoints of partitioned topics."""
