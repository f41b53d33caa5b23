"""Topic lookup in a cluster: which broker serves a topic, as Pulsar's lookup answers it.

A topic belongs to the bundle of its namespace whose hash range holds the topic's hash; the
bundle's owner serves it. A lookup that reaches:

- the owner: *connect* here;
- another broker: *redirect* to the owner, authoritatively (the client asks the owner next,
  and the owner answers for itself);
- any broker while the bundle's owner is gone (its process no longer has a connection to
  NATS, see ``presence.py``): its leases are ended now rather than when they expire, and
  the bundle has no owner;
- any broker while the bundle has no owner: the leader chooses one (see ``leader.py``); the
  chosen broker takes the bundle when it is this one, else the answer redirects there,
  authoritatively. A broker asked authoritatively takes an unowned bundle itself rather than
  redirecting again (Pulsar's rule, so that a redirect never loops).
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from starquake.cluster.bundles import BundleRef, NamespaceBundles, bundle_of
from starquake.cluster.leader import BundleAssigner
from starquake.cluster.ownership import BundleOwnership
from starquake.cluster.presence import BrokerPresence
from starquake.cluster.registry import BrokerInfo

log = logging.getLogger(__name__)


class LookupAnswer(NamedTuple):
    """Where a topic is served: ``here`` (connect) or a redirect to ``broker``."""

    broker: BrokerInfo
    here: bool
    bundle: BundleRef


class TopicLookup:
    """Answers lookups from one broker's view of ownership."""

    def __init__(
        self, ownership: BundleOwnership, assigner: BundleAssigner, presence: BrokerPresence
    ) -> None:
        self._ownership = ownership
        self._assigner = assigner
        self._presence = presence

    async def lookup(
        self, topic: str, namespace: str, bundles: NamespaceBundles, authoritative: bool
    ) -> LookupAnswer:
        """Who serves ``topic``; takes its bundle when this broker should own it."""
        ref = bundle_of(topic, namespace, bundles)
        me = self._ownership.me
        owner = await self._ownership.owner(ref)
        if (
            owner is not None
            and owner.broker_id != me.broker_id
            and await self._presence.gone(owner)
        ):
            ended = await self._ownership.end_leases_of(owner)
            if ended:
                log.info(
                    "broker %s is gone (no connection to NATS): ended its %d lease(s)",
                    owner.broker_id,
                    ended,
                )
            owner = await self._ownership.owner(ref)
        if owner is None:
            if not authoritative:
                chosen = await self._assigner.assign(ref)
                if chosen.broker_id != me.broker_id:
                    return LookupAnswer(chosen, False, ref)
            owner = await self._ownership.acquire(ref)
            if owner is None:  # the other owner's lease ended meanwhile: take it now
                owner = await self._ownership.acquire(ref)
        if owner is None:
            raise LookupError(f"bundle {ref.namespace}/{ref.bundle} has no owner")
        return LookupAnswer(owner, owner.broker_id == me.broker_id, ref)
