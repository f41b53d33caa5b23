"""Authorization: which role may do what, with the rules of Pulsar's default provider.

- Super users (``superUserRoles``) may do everything.
- A tenant's admins (the tenant's ``adminRoles``) and the super users administer the tenant:
  its namespaces, their policies and permissions, its topics.
- A role may produce on (consume from) a topic when it was granted ``produce`` (``consume``)
  on the topic's namespace or on the topic; a grant on a partitioned topic covers its
  partitions. A lookup needs either.
- A subscription that lists roles (``subscription_auth_roles``) may only be consumed from by
  one of them (an empty or absent list restricts nothing).
- With the namespace's ``subscription_auth_mode`` ``Prefix``, a role may only consume with a
  subscription whose name starts with the role (Pulsar's rule; its message suggests
  ``<role>-...``).
- With ``authorizationAllowWildcardsMatching``, a granted role ``prefix*`` (``*suffix``) matches
  every role that starts (ends) so; ``*`` alone matches every role.

Grants are kept in the namespace's policies under ``auth_policies``, as Pulsar keeps them::

    {"namespace_auth": {role: [action, ...]},
     "destination_auth": {topic: {role: [action, ...]}},
     "subscription_auth_roles": {subscription: [role, ...]}}

Every check reads the in-memory copy of the metadata (see
:class:`~starquake.broker.resources.PulsarResources`): cheap enough for the event loop. A
role of None (no authentication) is refused everything while authorization is on.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from starquake.broker.errors import BrokerServiceError, TopicNotFoundError
from starquake.common.topic_name import TopicName
from starquake.protocol.errors import ServerError

if TYPE_CHECKING:
    from starquake.broker.config import BrokerConfig
    from starquake.broker.resources import PulsarResources

__all__ = [
    "AUTH_ACTIONS",
    "AUTH_POLICIES",
    "SUBSCRIPTION_AUTH_MODE",
    "SUBSCRIPTION_AUTH_MODES",
    "AuthorizationError",
    "AuthorizationService",
    "TopicOperation",
    "default_namespace_allowed",
    "revalidate",
]

log = logging.getLogger(__name__)

AUTH_ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")
"""The actions a role may be granted (Pulsar's AuthAction)."""

AUTH_POLICIES = "auth_policies"
"""The field of a namespace's policies that holds its grants."""


SUBSCRIPTION_AUTH_MODE = "subscription_auth_mode"
"""The field of a namespace's policies that holds its subscription auth mode."""

SUBSCRIPTION_AUTH_MODES = ("None", "Prefix")
"""Pulsar's SubscriptionAuthMode values."""


class AuthorizationError(BrokerServiceError):
    """The role may not do what it asked (ServerError.AuthorizationError on the wire)."""

    code = ServerError.AuthorizationError


class TopicOperation(enum.Enum):
    """What is asked of a topic, as far as authorization is concerned."""

    LOOKUP = "lookup"
    """Lookups, partition metadata, stats: produce or consume."""
    PRODUCE = "produce"
    CONSUME = "consume"
    """Subscribe, unsubscribe, skip, expire, reset a cursor, peek: consume."""
    ADMIN = "admin"
    """Everything else (create, delete, terminate, unload, compact, policies, permissions):
    tenant admins only."""


def _split_roles(value: str) -> frozenset[str]:
    return frozenset(role.strip() for role in value.split(",") if role.strip())


def _wildcard_match(granted: str, role: str) -> bool:
    if granted.endswith("*") and role.startswith(granted[:-1]):
        return True
    return granted.startswith("*") and role.endswith(granted[1:])


class AuthorizationService:
    """The authorization checks of one broker: built from its configuration
    (``authorizationEnabled``, ``superUserRoles``, ``authorizationAllowWildcardsMatching``)
    over its metadata."""

    def __init__(self, config: BrokerConfig, resources: PulsarResources) -> None:
        self.enabled = bool(config.authorizationEnabled)
        self.super_users = _split_roles(config.superUserRoles)
        self.wildcards = bool(config.authorizationAllowWildcardsMatching)
        self._resources = resources
        if self.enabled and not config.authenticationEnabled:
            log.warning(
                "authorizationEnabled without authenticationEnabled: clients have no role, so "
                "every lookup, producer, consumer and admin call will be refused"
            )

    # --- roles ----------------------------------------------------------------------------------

    def is_super_user(self, role: str | None) -> bool:
        """Whether ``role`` is one of ``superUserRoles``."""
        return role is not None and role in self.super_users

    def is_tenant_admin(self, tenant: str, role: str | None) -> bool:
        """Whether ``role`` administers ``tenant``: a super user, or one of its adminRoles."""
        if self.is_super_user(role):
            return True
        if role is None or not self._resources.tenant_exists(tenant):
            return False
        roles = self._resources.tenant_info(tenant).get("adminRoles") or []
        return role in roles

    # --- grants ---------------------------------------------------------------------------------

    def auth_policies(self, namespace: str) -> dict[str, Any]:
        """The grants of ``namespace`` (empty maps when none, or no such namespace)."""
        stored = self._resources.policy(namespace, AUTH_POLICIES) or {}
        return {
            "namespace_auth": dict(stored.get("namespace_auth") or {}),
            "destination_auth": dict(stored.get("destination_auth") or {}),
            "subscription_auth_roles": dict(stored.get("subscription_auth_roles") or {}),
        }

    def _granted(self, grants: Mapping[str, Any] | None, role: str, action: str) -> bool:
        if not grants:
            return False
        actions = grants.get(role)
        if actions and action in actions:
            return True
        if self.wildcards:
            return any(
                action in acts and _wildcard_match(granted, role)
                for granted, acts in grants.items()
                if granted
            )
        return False

    def has_permission(self, topic: TopicName, role: str | None, action: str) -> bool:
        """Whether ``role`` was granted ``action`` on ``topic``'s namespace, on the topic, or
        (for a partition) on its partitioned topic."""
        if role is None:
            return False
        stored = self._resources.policy(topic.namespace_name, AUTH_POLICIES)
        if not stored:
            return False
        if self._granted(stored.get("namespace_auth"), role, action):
            return True
        by_topic = stored.get("destination_auth") or {}
        if self._granted(by_topic.get(str(topic)), role, action):
            return True
        base = topic.partitioned_topic_name
        return base != topic and self._granted(by_topic.get(str(base)), role, action)

    def can_produce(self, topic: TopicName, role: str | None) -> bool:
        """Whether ``role`` may produce to ``topic``."""
        return self.is_super_user(role) or self.has_permission(topic, role, "produce")

    def can_consume(
        self, topic: TopicName, role: str | None, subscription: str | None = None
    ) -> bool:
        """Whether ``role`` may consume from ``topic`` (with ``subscription``, when given)."""
        if self.is_super_user(role):
            return True
        if subscription:
            stored = self._resources.policy(topic.namespace_name, AUTH_POLICIES) or {}
            allowed = (stored.get("subscription_auth_roles") or {}).get(subscription)
            if allowed and role not in allowed:
                return False
            if self.prefix_refused(topic, role, subscription):
                return False
        return self.has_permission(topic, role, "consume")

    def prefix_refused(self, topic: TopicName, role: str | None, subscription: str) -> bool:
        """Whether the namespace's ``Prefix`` subscription auth mode refuses ``subscription``
        to ``role``."""
        mode = self._resources.policy(topic.namespace_name, SUBSCRIPTION_AUTH_MODE)
        return mode == "Prefix" and (role is None or not subscription.startswith(role))

    def can_lookup(self, topic: TopicName, role: str | None) -> bool:
        """Whether ``role`` may look ``topic`` up (it may produce or consume)."""
        return self.can_produce(topic, role) or self.can_consume(topic, role)

    # --- operations -----------------------------------------------------------------------------

    def allow_topic_operation(
        self,
        topic: TopicName,
        role: str | None,
        operation: TopicOperation,
        subscription: str | None = None,
    ) -> bool:
        """Whether ``role`` may do ``operation`` on ``topic`` (always, with authorization off):
        tenant admins may do everything, other roles what their grants allow."""
        if not self.enabled or self.is_tenant_admin(topic.tenant, role):
            return True
        if operation is TopicOperation.LOOKUP:
            return self.can_lookup(topic, role)
        if operation is TopicOperation.PRODUCE:
            return self.can_produce(topic, role)
        if operation is TopicOperation.CONSUME:
            return self.can_consume(topic, role, subscription)
        return False

    def can_list_topics(self, namespace: str, role: str | None) -> bool:
        """Listing a namespace's topics: tenant admins, and roles granted ``consume`` on the
        namespace itself."""
        if not self.enabled:
            return True
        tenant = namespace.partition("/")[0]
        if self.is_tenant_admin(tenant, role):
            return True
        stored = self._resources.policy(namespace, AUTH_POLICIES) or {}
        return role is not None and self._granted(stored.get("namespace_auth"), role, "consume")

    # --- checks of the binary protocol (raise AuthorizationError) -------------------------------

    def _refuse(self, what: str, role: str | None, target: object, why: str) -> None:
        log.info("role %s refused: %s on %s", role, what, target)
        raise AuthorizationError(f"Client is not authorized to {what} on {target}: {why}")

    def _why(self, role: str | None, needs: str) -> str:
        if role is None:
            return "the connection has no authenticated role"
        return f"role {role!r} {needs}"

    def _require_namespace(self, topic: TopicName) -> None:
        """As Pulsar: a topic of a tenant or namespace that does not exist is answered
        TopicNotFound, before (and whatever) the role may do."""
        if self.enabled and not self._resources.namespace_exists(topic.namespace_name):
            raise TopicNotFoundError(f"Namespace {topic.namespace_name} does not exist")

    def check_lookup(self, role: str | None, topic: TopicName, what: str = "Lookup") -> None:
        """LOOKUP and PARTITIONED_METADATA (``what`` "Get Partition Metadata")."""
        self._require_namespace(topic)
        if not self.allow_topic_operation(topic, role, TopicOperation.LOOKUP):
            self._refuse(what, role, topic, self._why(role, "has neither produce nor consume"))

    def check_produce(self, role: str | None, topic: TopicName, initial_subscription: str) -> None:
        """PRODUCER (an initial subscription also needs consume, as subscribing does)."""
        self._require_namespace(topic)
        if not self.allow_topic_operation(topic, role, TopicOperation.PRODUCE):
            self._refuse("Produce", role, topic, self._why(role, "has no produce permission"))
        if initial_subscription and not self.allow_topic_operation(
            topic, role, TopicOperation.CONSUME, initial_subscription
        ):
            why = self._why(role, f"may not consume with subscription {initial_subscription!r}")
            self._refuse("Produce", role, topic, why)

    def check_subscribe(self, role: str | None, topic: TopicName, subscription: str) -> None:
        """SUBSCRIBE."""
        self._require_namespace(topic)
        if not self.allow_topic_operation(topic, role, TopicOperation.CONSUME, subscription):
            why = self._why(role, f"may not consume with subscription {subscription!r}")
            if self.prefix_refused(topic, role, subscription):
                why = (
                    "The subscription name needs to be prefixed by the authentication role, "
                    f"like {role}-xxxx"
                )
            self._refuse("subscribe", role, topic, why)

    def get_topics_refusal(self, role: str | None, namespace: str) -> AuthorizationError | None:
        """GET_TOPICS_OF_NAMESPACE: None when allowed, else the error to answer."""
        if self.can_list_topics(namespace, role):
            return None
        why = self._why(role, "is not a tenant admin and has no consume permission there")
        log.info("role %s refused: GetTopicsOfNamespace on %s", role, namespace)
        return AuthorizationError(
            f"Client is not authorized to GetTopicsOfNamespace on {namespace}: {why}"
        )


def default_namespace_allowed(config: BrokerConfig) -> bool:
    """Whether namespace ``public/default`` is created at first start. Pulsar's standalone
    creates it through the broker's own admin client, so it exists when that client is allowed
    to: authorization (or authentication) is off, the client has credentials
    (``brokerClientAuthenticationPlugin``, a super user's in practice), or its role without
    credentials, ``anonymousUserRole``, is a super user. Otherwise Pulsar logs the refusal and
    leaves the namespace to the provisioning, and so does Starquake."""
    if not (config.authorizationEnabled and config.authenticationEnabled):
        return True
    if config.brokerClientAuthenticationPlugin.strip():
        return True
    anonymous = config.anonymousUserRole
    return bool(anonymous) and anonymous in _split_roles(config.superUserRoles)


class ConnectionsContext(Protocol):
    """What a revalidation reads of the broker: its authorization and its open connections."""

    @property
    def authorization(self) -> AuthorizationService:
        """The broker's authorization service."""

    @property
    def connections(self) -> Collection[Any]:
        """The open client connections."""


def revalidate(service: ConnectionsContext, namespace: str) -> int:
    """After the grants of ``namespace`` changed: close, from the broker side, the producers
    and consumers of its topics whose role may no longer produce or consume there (as Pulsar
    does when a namespace's policies change; their clients then try again and are refused).
    Returns how many were closed."""
    authorization = service.authorization
    if not authorization.enabled:
        return 0
    closed = 0
    for cnx in list(service.connections):
        role = cnx.auth_role
        for producer in list(cnx.producers.values()):
            topic = TopicName.parse(producer.topic.full_name)
            if topic.namespace_name != namespace:
                continue
            if not authorization.allow_topic_operation(topic, role, TopicOperation.PRODUCE):
                log.info(
                    "producer %s of role %s may no longer produce on %s", producer.name, role, topic
                )
                producer.disconnect()
                closed += 1
        for consumer in list(cnx.consumers.values()):
            subscription = consumer.subscription
            topic = TopicName.parse(subscription.topic.full_name)
            if topic.namespace_name != namespace:
                continue
            if not authorization.allow_topic_operation(
                topic, role, TopicOperation.CONSUME, subscription.name
            ):
                log.info(
                    "consumer of role %s may no longer consume from %s (subscription %s)",
                    role,
                    topic,
                    subscription.name,
                )
                cnx.disconnect_consumer(consumer)
                closed += 1
    return closed
