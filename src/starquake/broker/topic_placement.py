"""Which broker serves a topic: this one alone (standalone), or the owner of its bundle.

A standalone broker serves every topic. A broker in a cluster (one with a
:class:`~starquake.cluster.membership.ClusterMembership`) serves the topics of the namespace
bundles it owns: a lookup names the owner (taking the bundle when this broker should own it),
and a command for a topic of a bundle owned elsewhere is refused with ``ServiceNotReady``, so
that the client looks the topic up again, as Pulsar refuses it. A namespace's bundles are
those of its policies (``bundles.boundaries``), else ``defaultNumberOfNamespaceBundles``
equal ranges.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from starquake.broker.errors import ServiceNotReadyError
from starquake.cluster.bundles import NamespaceBundles
from starquake.cluster.membership import ClusterMembership, NoOwnerError
from starquake.cluster.registry import BrokerInfo
from starquake.common.topic_name import TopicName

__all__ = ["TopicPlacement"]

log = logging.getLogger(__name__)


class TopicPlacement:
    """Where topics are served, from this broker's view."""

    def __init__(
        self, default_bundles: int, namespace_policies: Callable[[str], dict[str, Any]]
    ) -> None:
        self._default = NamespaceBundles.equal(default_bundles)
        self._policies = namespace_policies
        self.membership: ClusterMembership | None = None
        """This broker's part in a cluster (None: standalone, every topic is served here)."""

    def bundles(self, namespace: str) -> NamespaceBundles:
        """The namespace's bundles (its policies', else the default split)."""
        stored = self._policies(namespace).get("bundles")
        if isinstance(stored, dict) and "boundaries" in stored:
            try:
                return NamespaceBundles.from_policies(stored)
            except ValueError as exc:
                log.warning("namespace %s has unusable bundles (%s): default split", namespace, exc)
        return self._default

    def check_served(self, topic: TopicName) -> None:
        """Raise ServiceNotReadyError unless this broker serves ``topic`` now."""
        membership = self.membership
        if membership is None:
            return
        namespace = topic.namespace_name
        if not membership.owns(str(topic), namespace, self.bundles(namespace)):
            raise ServiceNotReadyError(
                f"Namespace bundle for topic ({topic}) not served by this instance"
            )

    async def owner(self, topic: TopicName, authoritative: bool) -> BrokerInfo | None:
        """The broker that serves ``topic`` (None: this one; it takes the bundle if due)."""
        membership = self.membership
        if membership is None:
            return None
        namespace = topic.namespace_name
        try:
            answer = await membership.locate(
                str(topic), namespace, self.bundles(namespace), authoritative
            )
        except NoOwnerError as exc:
            # no owner could be found or chosen now (no live broker, the store not answering)
            raise ServiceNotReadyError(f"No broker serves {topic} now: {exc}") from None
        return None if answer.here else answer.broker
