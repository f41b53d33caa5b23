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
from collections.abc import Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol

from starquake.broker.contexts import UnloadableTopic
from starquake.broker.errors import BrokerServiceError, ServiceNotReadyError, TopicNotServedError
from starquake.cluster.bundles import BundleRef, NamespaceBundles, NoOwnerError, bundle_of
from starquake.common.topic_name import TopicName

if TYPE_CHECKING:  # cluster mode's NATS parts are imported only when it is on
    from starquake.broker.nonpersistent import NonPersistentTopic
    from starquake.broker.topic import PersistentTopic
    from starquake.cluster.membership import ClusterMembership
    from starquake.cluster.registry import BrokerInfo

__all__ = ["PlacedTopics", "TopicPlacement", "is_transaction_log"]

log = logging.getLogger(__name__)


def is_transaction_log(name: str) -> bool:
    """Whether ``name`` is a transaction coordinator's log or a pending-ack log. They are
    not placed by their own bundles: a coordinator's log goes with the coordinator (the
    owner of its assign partition), a pending-ack log with its subscription's topic; the
    new holder's open fences the previous one's ledger."""
    return name.endswith("__transaction_pending_ack") or name.startswith(
        "persistent://pulsar/system/__transaction_log_"
    )


class PlacedTopics(Protocol):
    """The loaded topics of a broker, and how one is unloaded."""

    @property
    def topics(self) -> Mapping[str, PersistentTopic]:
        """The loaded persistent topics by full name."""

    @property
    def nonpersistent_topics(self) -> MutableMapping[str, NonPersistentTopic]:
        """The non-persistent topics by full name."""

    def unload_topic(self, topic: UnloadableTopic) -> None:
        """Close a loaded topic and its ledger and forget it."""


class TopicPlacement:
    """Where topics are served, from this broker's view."""

    def __init__(
        self, default_bundles: int, namespace_policies: Callable[[str], dict[str, Any]]
    ) -> None:
        self._default = NamespaceBundles.equal(default_bundles)
        self._policies = namespace_policies
        self.on_bundle_closed: list[Callable[[BundleRef, NamespaceBundles], None]] = []
        """Told of each bundle closed here (after its topics closed)."""
        self.on_bundle_acquired: list[Callable[[BundleRef, NamespaceBundles], None]] = []
        """Told of each bundle this broker has just taken (it serves it from now)."""
        self.membership: ClusterMembership | None = None
        """This broker's part in a cluster (None: standalone, every topic is served here)."""

    def bundles(self, namespace: str) -> NamespaceBundles:
        """The namespace's bundles (its policies', else the default split)."""
        return self.bundles_in(self._policies(namespace))

    def bundles_in(self, policies: dict[str, Any]) -> NamespaceBundles:
        """The bundles that namespace ``policies`` give (the default split without any)."""
        stored = policies.get("bundles")
        if isinstance(stored, dict) and "boundaries" in stored:
            try:
                return NamespaceBundles.from_policies(stored)
            except ValueError as exc:
                log.warning("unusable namespace bundles (%s): the default split", exc)
        return self._default

    def serves(self, topic: TopicName) -> bool:
        """Whether this broker serves ``topic`` now."""
        membership = self.membership
        if membership is None or is_transaction_log(str(topic)):
            return True
        namespace = topic.namespace_name
        return membership.owns(str(topic), namespace, self.bundles(namespace))

    def check_served(self, topic: TopicName) -> None:
        """Raise ServiceNotReadyError unless this broker serves ``topic`` now."""
        if not self.serves(topic):
            raise TopicNotServedError(topic)

    def bundle_acquired(self, ref: BundleRef) -> None:
        """This broker has just taken bundle ``ref``: tell the listeners."""
        if not self.on_bundle_acquired:
            return
        try:
            bundles = self.bundles(ref.namespace)
        except BrokerServiceError:  # the namespace was deleted meanwhile: nothing to start
            return
        for listener in self.on_bundle_acquired:
            listener(ref, bundles)

    def in_bundle(
        self, topic: TopicName, ref: BundleRef, bundles: NamespaceBundles | None = None
    ) -> bool:
        """Whether ``topic`` belongs to the bundle ``ref`` (of ``bundles``, or of the
        namespace's bundles now)."""
        namespace = topic.namespace_name
        if namespace != ref.namespace:
            return False
        split = bundles if bundles is not None else self.bundles(namespace)
        return bundle_of(str(topic), namespace, split) == ref

    def close_bundle(
        self, ref: BundleRef, loaded: PlacedTopics, bundles: NamespaceBundles | None = None
    ) -> int:
        """Close the loaded topics of bundle ``ref`` (of ``bundles``: by default the
        namespace's now), which this broker no longer serves (their clients look them up
        again and reach the new owner); how many."""
        split = bundles if bundles is not None else self.bundles(ref.namespace)
        persistent = [
            t
            for t in loaded.topics.values()
            if self.in_bundle(t.name, ref, split) and not is_transaction_log(t.full_name)
        ]
        for topic in persistent:
            loaded.unload_topic(topic)
        others = loaded.nonpersistent_topics
        transient = [n for n, t in others.items() if self.in_bundle(t.name, ref, split)]
        for name in transient:
            others.pop(name).close()
        closed = len(persistent) + len(transient)
        log.info("bundle %s/%s: %d topic(s) closed", ref.namespace, ref.bundle, closed)
        for listener in self.on_bundle_closed:
            listener(ref, split)
        return closed

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
