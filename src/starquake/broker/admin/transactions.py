"""The transactions' admin endpoints, with Pulsar's paths (``/admin/v3/transactions``, also
served under ``/admin/v2/transactions``), super-user only:

- ``GET .../coordinators``: every coordinator's stats by id; ``.../coordinators/{id}``: one;
- ``GET .../transactionMetadata/{mostSigBits}/{leastSigBits}``: one ongoing transaction;
- ``GET .../transactionBufferStats/{tenant}/{namespace}/{topic}``: a topic's buffer;
- ``GET .../pendingAckStats/{tenant}/{namespace}/{topic}/{subName}``: a subscription's
  pending acks;
- ``GET .../slowTransactions/{timeout}``: the transactions open for longer than ``timeout``
  milliseconds, by id.

With transactions off every one answers 503, as Pulsar; an unknown coordinator or transaction
is 404.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from starquake.broker import topic_admin
from starquake.broker.admin.replies import Reply
from starquake.broker.admin.routing import Route
from starquake.broker.errors import SubscriptionNotFoundError
from starquake.broker.transactions import stats
from starquake.broker.web import Call, Need, json_reply
from starquake.common.topic_name import TopicName

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

DISABLED = "This Broker is not configured with transactionCoordinatorEnabled=true."
# Pulsar serves these under /admin/v3; /admin/v2 answers the same
_BASES = ("/admin/v3/transactions", "/admin/v2/transactions")
_NUMBER = r"-?\d{1,19}"


def _unavailable() -> Reply:
    return json_reply(503, {"reason": DISABLED})


def _no_coordinator(tc_id: int) -> Reply:
    return json_reply(
        404, {"reason": f"Transaction coordinator not found. coordinatorId : {tc_id}"}
    )


async def coordinators(service: BrokerService, call: Call) -> Reply:
    """Every coordinator's ``TransactionCoordinatorStats``, by id."""
    if not service.transactions.enabled:
        return _unavailable()
    found = service.transactions.coordinators
    return json_reply(200, {str(i): stats.coordinator_stats(c) for i, c in sorted(found.items())})


async def coordinator(service: BrokerService, call: Call) -> Reply:
    """One coordinator's ``TransactionCoordinatorStats``."""
    if not service.transactions.enabled:
        return _unavailable()
    tc_id = int(call.params["id"])
    found = service.transactions.coordinators.get(tc_id)
    if found is None:
        return _no_coordinator(tc_id)
    return json_reply(200, stats.coordinator_stats(found))


async def transaction_metadata(service: BrokerService, call: Call) -> Reply:
    """One ongoing transaction's ``TransactionMetadata`` (404 when unknown or ended)."""
    txns = service.transactions
    if not txns.enabled:
        return _unavailable()
    most, least = int(call.params["most"]), int(call.params["least"])
    found = txns.coordinators.get(most)
    if found is None:
        return _no_coordinator(most)
    meta = found.state.txns.get(least)
    if meta is None:
        return json_reply(404, {"reason": f"Transaction not found. txnId : ({most},{least})"})
    return json_reply(200, stats.metadata(found, meta, txns.buffers, txns.pending_acks))


async def slow_transactions(service: BrokerService, call: Call) -> Reply:
    """The ongoing transactions opened more than ``timeout`` milliseconds ago, by id."""
    txns = service.transactions
    if not txns.enabled:
        return _unavailable()
    cutoff = int(time.time() * 1000) - int(call.params["timeout"])
    slow = {}
    for found in txns.coordinators.values():
        for meta in stats.ongoing(found):
            if meta.opened_at_ms and meta.opened_at_ms < cutoff:
                entry = stats.metadata(found, meta, txns.buffers, txns.pending_acks)
                slow[entry["txnId"]] = entry
    return json_reply(200, slow)


def _topic(call: Call) -> TopicName:
    p = call.params
    return TopicName.parse(f"persistent://{p['tenant']}/{p['namespace']}/{p['topic']}")


async def buffer_stats(service: BrokerService, call: Call) -> Reply:
    """The topic's ``TransactionBufferStats`` (the topic is loaded; 404 when unknown)."""
    if not service.transactions.enabled:
        return _unavailable()
    topic = await topic_admin.persistent_topic(service, _topic(call))
    buffer = service.transactions.buffers.get(topic.full_name)
    if buffer is None:
        return json_reply(503, {"reason": f"Transaction buffer of {topic.full_name} not ready"})
    return json_reply(200, stats.buffer_stats(buffer))


async def pending_ack_stats(service: BrokerService, call: Call) -> Reply:
    """The subscription's ``TransactionPendingAckStats`` (404 for an unknown subscription)."""
    if not service.transactions.enabled:
        return _unavailable()
    topic = await topic_admin.persistent_topic(service, _topic(call))
    name = call.params["sub"]
    if name not in topic.subscriptions:
        raise SubscriptionNotFoundError(f"Subscription {name} not found")
    handle = service.transactions.pending_acks.get((topic.full_name, name))
    return json_reply(200, stats.pending_ack_stats(handle))


_SEG = r"[^/]+"
_TOPIC = rf"(?P<tenant>{_SEG})/(?P<namespace>{_SEG})/(?P<topic>{_SEG})"

ROUTES = [
    route
    for base in _BASES
    for route in (
        Route("GET", f"{base}/coordinators", coordinators, Need.SUPER_USER),
        Route("GET", rf"{base}/coordinators/(?P<id>\d{{1,9}})", coordinator, Need.SUPER_USER),
        Route(
            "GET",
            rf"{base}/transactionMetadata/(?P<most>{_NUMBER})/(?P<least>{_NUMBER})",
            transaction_metadata,
            Need.SUPER_USER,
        ),
        Route("GET", f"{base}/transactionBufferStats/{_TOPIC}", buffer_stats, Need.SUPER_USER),
        Route(
            "GET",
            f"{base}/pendingAckStats/{_TOPIC}/(?P<sub>{_SEG})",
            pending_ack_stats,
            Need.SUPER_USER,
        ),
        Route(
            "GET",
            rf"{base}/slowTransactions/(?P<timeout>\d{{1,19}})",
            slow_transactions,
            Need.SUPER_USER,
        ),
    )
]
"""The transactions' endpoints."""
