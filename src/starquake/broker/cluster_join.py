"""A broker joining its cluster: its registration, its load reports, its lost bundles.

Once its ports are bound (its URLs known), a broker of a cluster joins it
(:class:`~starquake.cluster.membership.ClusterMembership`): it registers under its broker id,
Pulsar's ``host:webPort`` of its advertised address, with its URLs; its load reports count
its topics, their message rates and the CPU the broker process used since the previous
report; a bundle it loses has its topics closed; a bundle it takes is announced to the
placement's listeners (the transaction coordinators of that bundle start). From then on its
:class:`~starquake.broker.topic_placement.TopicPlacement` answers lookups for the cluster.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from typing import Protocol

from starquake.broker.topic_placement import PlacedTopics, TopicPlacement
from starquake.broker.urls import BrokerUrls
from starquake.cluster.membership import ClusterMembership
from starquake.cluster.registry import BrokerInfo, BrokerLoad

__all__ = ["broker_info", "join_cluster"]


class JoiningBroker(PlacedTopics, Protocol):
    """What joining reads of the broker: its loaded topics and its placement."""

    @property
    def placement(self) -> TopicPlacement:
        """Which broker serves a topic (given the membership once joined)."""


def broker_info(urls: BrokerUrls) -> BrokerInfo:
    """This broker's registration: id ``host:port`` of its web URL, and every URL."""
    web = urllib.parse.urlsplit(urls.any_web_service_url)
    return BrokerInfo(
        broker_id=f"{web.hostname}:{web.port}",
        broker_url=urls.service_url,
        broker_url_tls=urls.service_url_tls,
        http_url=urls.web_service_url,
        http_url_tls=urls.web_service_url_tls,
    )


class LoadMeter:
    """The broker's load now: topics, message rates and CPU since the previous report."""

    def __init__(self, broker: JoiningBroker) -> None:
        self._broker = broker
        self._at = time.monotonic()
        self._cpu = time.process_time()
        self._in, self._out = self._counters()

    def _counters(self) -> tuple[int, int]:
        """Messages published to and dispatched from the loaded persistent topics so far."""
        published = dispatched = 0
        for topic in self._broker.topics.values():
            published += topic.msg_in_counter
            for subscription in topic.subscriptions.values():
                dispatched += subscription.departed_out[0]
                dispatched += sum(c.msg_out_counter for c in subscription.consumers)
        return published, dispatched

    def __call__(self) -> BrokerLoad:
        now, cpu = time.monotonic(), time.process_time()
        published, dispatched = self._counters()
        elapsed = max(now - self._at, 1e-3)
        # a topic unloaded meanwhile takes its counts along: no negative rates
        rate_in = max(published - self._in, 0) / elapsed
        rate_out = max(dispatched - self._out, 0) / elapsed
        percent = 100 * (cpu - self._cpu) / (elapsed * (os.cpu_count() or 1))
        self._at, self._cpu, self._in, self._out = now, cpu, published, dispatched
        return BrokerLoad(
            topics=len(self._broker.topics) + len(self._broker.nonpersistent_topics),
            msg_rate_in=round(rate_in, 1),
            msg_rate_out=round(rate_out, 1),
            cpu_percent=round(percent, 1),
        )


async def join_cluster(
    broker: JoiningBroker,
    servers: list[str],
    cluster: str,
    urls: BrokerUrls,
    lease_seconds: float,
    give_up_after: float = 30,
    replicas: int = 1,
) -> ClusterMembership:
    """Join ``cluster`` over the JetStream nodes ``servers`` (its registry and leases kept in
    ``replicas`` copies); lookups answer for the cluster from then on. Raises what connecting
    raises when the nodes do not answer."""
    placement = broker.placement
    member = await ClusterMembership.join(
        servers,
        cluster,
        broker_info(urls),
        lease_seconds=lease_seconds,
        on_bundle_lost=lambda ref: placement.close_bundle(ref, broker),
        on_bundle_acquired=placement.bundle_acquired,
        load=LoadMeter(broker),
        replicas=replicas,
        give_up_after=give_up_after,
    )
    placement.membership = member
    return member
