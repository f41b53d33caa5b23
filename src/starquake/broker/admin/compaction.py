"""Compaction endpoints of the admin API, as Pulsar's.

- ``PUT {topic}/compaction`` starts compacting the topic (every partition of a partitioned
  topic): 204; 409 while a compaction of it (of one of the partitions) runs; 404 for a topic
  that does not exist.
- ``GET {topic}/compaction``: the last compaction's status, Pulsar's LongRunningProcessStatus
  ``{"status": "NOT_RUN" | "RUNNING" | "SUCCESS" | "ERROR", "lastError": "..."}``. For a
  partitioned topic the partitions' statuses are merged: ERROR if one failed (with its error),
  else RUNNING if one runs, SUCCESS if all succeeded, NOT_RUN otherwise.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from starquake.broker import topic_admin
from starquake.broker.admin.replies import NO_CONTENT, Reply
from starquake.broker.admin.routing import Route
from starquake.broker.admin.topics import TOPIC, topic_of
from starquake.broker.compaction.state import ERROR, NOT_RUN, RUNNING, SUCCESS
from starquake.broker.resources import ConflictError
from starquake.broker.web import Call, Need, json_reply
from starquake.common.topic_name import TopicName

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService
    from starquake.broker.topic import PersistentTopic

log = logging.getLogger(__name__)


def merged_status(statuses: list[dict[str, Any]]) -> dict[str, Any]:
    """One status for the partitions of a partitioned topic (see the module docstring)."""
    for status in statuses:
        if status["status"] == ERROR:
            return status
    if any(s["status"] == RUNNING for s in statuses):
        return {"status": RUNNING, "lastError": ""}
    if statuses and all(s["status"] == SUCCESS for s in statuses):
        return {"status": SUCCESS, "lastError": ""}
    return {"status": NOT_RUN, "lastError": ""}


async def topics_of(service: BrokerService, topic: TopicName) -> list[PersistentTopic]:
    """The topic, or each partition of a partitioned topic, loaded."""
    count = service.resources.partitions(topic)
    names = [topic.partition(i) for i in range(count)] if count else [topic]
    return [await topic_admin.persistent_topic(service, name) for name in names]


async def trigger(service: BrokerService, call: Call) -> Reply:
    """Start compacting the topic (each partition); 409 while one runs."""
    loaded = await topics_of(service, topic_of(call.params))
    if any(t.compaction.running for t in loaded):
        raise ConflictError("Compaction already in progress")
    for topic in loaded:
        service.compaction.trigger(topic)
    return NO_CONTENT


async def status(service: BrokerService, call: Call) -> Reply:
    """The compaction status of the topic (merged over its partitions)."""
    loaded = await topics_of(service, topic_of(call.params))
    return json_reply(200, merged_status([t.compaction.status_json() for t in loaded]))


ROUTES = [
    Route("PUT", TOPIC + "/compaction", trigger, Need.TOPIC_ADMIN),
    Route("GET", TOPIC + "/compaction", status, Need.TOPIC_ADMIN),
]
"""The endpoints of compaction."""
