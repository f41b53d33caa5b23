"""Permissions in the admin API, on Pulsar's paths and with its answers.

Namespaces, under ``/admin/v2/namespaces/{tenant}/{namespace}``:

- ``GET .../permissions``: ``{role: [action, ...]}`` granted on the namespace;
- ``POST .../permissions/{role}`` with a JSON list of actions (``produce``, ``consume``,
  ``functions``, ``sources``, ``sinks``, ``packages``): what ``role`` may do on every topic of
  the namespace (replacing its previous namespace grant); ``DELETE``: revoke it;
- ``GET .../permissions/subscription``: ``{subscription: [role, ...]}``;
  ``POST .../permissions/subscription/{subscription}`` with a JSON list of roles: only they may
  consume with that subscription; ``DELETE .../permissions/{subscription}/{role}``: remove one.

- ``GET|POST .../subscriptionAuthMode`` (``"None"`` or ``"Prefix"``, stored as
  ``subscription_auth_mode``): with ``Prefix``, a role that is neither a super user nor a
  tenant admin may only subscribe with a subscription name that starts with the role.

Topics, under ``/admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}``:

- ``GET .../permissions``: the topic's effective grants, the namespace's and the topic's
  (their union for a role granted on both);
- ``POST .../permissions/{role}`` with a JSON list of actions: grant them on the topic (on a
  partitioned topic, on every partition too); ``DELETE``: revoke the role's topic grant (412
  when it has none at the topic level).

An action Pulsar does not know, or a body that is not a JSON list, is refused with 400; an
unknown namespace with 404. Grants are stored in the namespace's policies (see
:mod:`starquake.broker.security.authorization`); after a change, producers and consumers whose
role lost its permission are closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starquake.broker.admin.policies import namespace_of
from starquake.broker.admin.replies import (
    NO_CONTENT,
    SEGMENT,
    BadRequest,
    Reply,
    json_body,
)
from starquake.broker.admin.routing import Route
from starquake.broker.errors import BrokerServiceError
from starquake.broker.resources import NotFoundError
from starquake.broker.security.authorization import (
    AUTH_ACTIONS,
    AUTH_POLICIES,
    SUBSCRIPTION_AUTH_MODE,
    SUBSCRIPTION_AUTH_MODES,
    revalidate,
)
from starquake.broker.web import Call, Need, json_reply
from starquake.common.topic_name import TopicName

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

log = logging.getLogger(__name__)

NAMESPACE = rf"/admin/v2/namespaces/(?P<tenant>{SEGMENT})/(?P<namespace>{SEGMENT})"
TOPIC = (
    rf"/admin/v2/(?P<domain>persistent|non-persistent)/(?P<tenant>{SEGMENT})"
    rf"/(?P<namespace>{SEGMENT})/(?P<topic>{SEGMENT})"
)
ROLE = rf"(?P<role>{SEGMENT})"


class PermissionNotSet(BrokerServiceError):
    """A revoke of a grant that does not exist at that level (HTTP 412)."""


def parse_actions(body: bytes) -> list[str]:
    """The actions of a grant's body: a JSON list of Pulsar's action names (400 otherwise)."""
    value = json_body(body)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise BadRequest(f"the body must be a JSON list of actions: {', '.join(AUTH_ACTIONS)}")
    unknown = sorted(set(value) - set(AUTH_ACTIONS))
    if unknown:
        raise BadRequest(
            f"unknown action(s) {', '.join(unknown)}; the actions are {', '.join(AUTH_ACTIONS)}"
        )
    return sorted(set(value))


def parse_roles(body: bytes) -> list[str]:
    """The role names of a JSON list body, deduplicated and sorted (BadRequest otherwise)."""
    value = json_body(body)
    if not isinstance(value, list) or not all(isinstance(i, str) and i for i in value):
        raise BadRequest("the body must be a JSON list of role names")
    return sorted(set(value))


def _auth(policies: dict[str, Any]) -> dict[str, Any]:
    """The policies' grants, created empty when missing (edited in place)."""
    auth: dict[str, Any] = policies.setdefault(AUTH_POLICIES, {})
    for field in ("namespace_auth", "destination_auth", "subscription_auth_roles"):
        auth.setdefault(field, {})
    return auth


def effective_topic_permissions(auth: dict[str, Any], topic: TopicName) -> dict[str, list[str]]:
    """A topic's grants as Pulsar answers them: the namespace's, with the topic's added."""
    merged = {role: set(actions) for role, actions in auth["namespace_auth"].items()}
    for role, actions in (auth["destination_auth"].get(str(topic)) or {}).items():
        merged.setdefault(role, set()).update(actions)
    return sorted_grants(merged)


def sorted_grants(grants: dict[str, Any]) -> dict[str, list[str]]:
    """Grants (name -> actions or roles) as answered: names in order, each list sorted."""
    return {name: sorted(values) for name, values in sorted(grants.items())}


def topic_of(service: BrokerService, params: dict[str, str]) -> TopicName:
    """The topic the path names, in a namespace that exists."""
    name = TopicName.parse(
        f"{params['domain']}://{params['tenant']}/{params['namespace']}/{params['topic']}"
    )
    namespace_of(service, params)
    return name


async def change(
    service: BrokerService, namespace: str, edit: Callable[[dict[str, Any]], None]
) -> None:
    """Apply ``edit`` to the namespace's grants, store them, and close the producers and
    consumers that lost their permission."""
    await asyncio.to_thread(
        service.resources.update_namespace_policies, namespace, lambda p: edit(_auth(p))
    )
    revalidate(service, namespace)


# --- namespaces -----------------------------------------------------------------------------


def _grants(service: BrokerService, call: Call, kind: str) -> Reply:
    """The namespace's grants of ``kind`` (``namespace_auth``: role -> actions,
    ``subscription_auth_roles``: subscription -> roles)."""
    auth = service.authorization.auth_policies(namespace_of(service, call.params))
    return json_reply(200, sorted_grants(auth[kind]))


async def _grant(
    service: BrokerService, namespace: str, kind: str, name: str, values: list[str]
) -> None:
    """Set the grant ``name`` of ``kind`` of the namespace to ``values``."""

    def edit(auth: dict[str, Any]) -> None:
        auth[kind][name] = values

    await change(service, namespace, edit)


async def get_namespace(service: BrokerService, call: Call) -> Reply:
    """The namespace's grants: role -> actions."""
    return _grants(service, call, "namespace_auth")


async def grant_namespace(service: BrokerService, call: Call) -> Reply:
    """Grant the body's actions to the role on the namespace."""
    namespace = namespace_of(service, call.params)
    role, actions = call.params["role"], parse_actions(call.body)
    await _grant(service, namespace, "namespace_auth", role, actions)
    log.info("namespace %s: role %s granted %s", namespace, role, actions)
    return NO_CONTENT


async def revoke_namespace(service: BrokerService, call: Call) -> Reply:
    """Revoke the role's namespace grant."""
    namespace = namespace_of(service, call.params)
    role = call.params["role"]
    await change(service, namespace, lambda auth: auth["namespace_auth"].pop(role, None))
    log.info("namespace %s: role %s revoked", namespace, role)
    return NO_CONTENT


async def get_subscriptions(service: BrokerService, call: Call) -> Reply:
    """The namespace's subscription grants: subscription -> roles."""
    return _grants(service, call, "subscription_auth_roles")


async def grant_subscription(service: BrokerService, call: Call) -> Reply:
    """Only the body's roles may consume with the subscription."""
    namespace = namespace_of(service, call.params)
    subscription, roles = call.params["subscription"], parse_roles(call.body)
    await _grant(service, namespace, "subscription_auth_roles", subscription, roles)
    log.info("namespace %s: subscription %s limited to roles %s", namespace, subscription, roles)
    return NO_CONTENT


async def revoke_subscription(service: BrokerService, call: Call) -> Reply:
    """Remove one role from a subscription's roles."""
    namespace = namespace_of(service, call.params)
    subscription, role = call.params["subscription"], call.params["role"]
    if (
        subscription
        not in service.authorization.auth_policies(namespace)["subscription_auth_roles"]
    ):
        raise NotFoundError(f"Subscription {subscription} has no roles set in {namespace}")

    def edit(auth: dict[str, Any]) -> None:
        by_subscription = auth["subscription_auth_roles"]
        remaining = [r for r in by_subscription.get(subscription, []) if r != role]
        if remaining:
            by_subscription[subscription] = remaining
        else:  # no roles left: the subscription is no longer restricted
            by_subscription.pop(subscription, None)

    await change(service, namespace, edit)
    log.info("namespace %s: role %s removed from subscription %s", namespace, role, subscription)
    return NO_CONTENT


# --- topics ---------------------------------------------------------------------------------


def with_partitions(service: BrokerService, topic: TopicName) -> list[str]:
    """The topic and, for a partitioned topic, each of its partitions."""
    partitions = service.resources.partitions(topic)
    return [str(topic)] + [str(topic.partition(i)) for i in range(partitions)]


async def get_topic(service: BrokerService, call: Call) -> Reply:
    """The topic's effective grants (the namespace's and the topic's)."""
    topic = topic_of(service, call.params)
    auth = service.authorization.auth_policies(topic.namespace_name)
    return json_reply(200, effective_topic_permissions(auth, topic))


async def grant_topic(service: BrokerService, call: Call) -> Reply:
    """Grant the body's actions to the role on the topic (and its partitions)."""
    topic = topic_of(service, call.params)
    role, actions = call.params["role"], parse_actions(call.body)
    names = with_partitions(service, topic)

    def edit(auth: dict[str, Any]) -> None:
        for name in names:
            auth["destination_auth"].setdefault(name, {})[role] = actions

    await change(service, topic.namespace_name, edit)
    log.info("topic %s: role %s granted %s", topic, role, actions)
    return NO_CONTENT


async def revoke_topic(service: BrokerService, call: Call) -> Reply:
    """Revoke the role's topic grant (412 when it has none on the topic)."""
    topic = topic_of(service, call.params)
    role = call.params["role"]
    by_topic = service.authorization.auth_policies(topic.namespace_name)["destination_auth"]
    if role not in (by_topic.get(str(topic)) or {}):
        raise PermissionNotSet("Permissions are not set at the topic level")
    names = with_partitions(service, topic)

    def edit(auth: dict[str, Any]) -> None:
        grants = auth["destination_auth"]
        for name in names:
            roles = grants.get(name)
            if roles is not None:
                roles.pop(role, None)
                if not roles:
                    del grants[name]

    await change(service, topic.namespace_name, edit)
    log.info("topic %s: role %s revoked", topic, role)
    return NO_CONTENT


async def get_auth_mode(service: BrokerService, call: Call) -> Reply:
    """The namespace's subscription auth mode (``None`` or ``Prefix``)."""
    mode = service.resources.policy(namespace_of(service, call.params), SUBSCRIPTION_AUTH_MODE)
    return json_reply(200, mode or "None")


async def set_auth_mode(service: BrokerService, call: Call) -> Reply:
    """Set the namespace's subscription auth mode from the body."""
    namespace = namespace_of(service, call.params)
    mode = json_body(call.body, "None")
    if mode not in SUBSCRIPTION_AUTH_MODES:
        raise BadRequest(f"the body must be one of {', '.join(SUBSCRIPTION_AUTH_MODES)}")

    def edit(policies: dict[str, Any]) -> None:
        policies[SUBSCRIPTION_AUTH_MODE] = mode

    await asyncio.to_thread(service.resources.update_namespace_policies, namespace, edit)
    revalidate(service, namespace)
    log.info("namespace %s: subscription auth mode set to %s", namespace, mode)
    return NO_CONTENT


_SUBSCRIPTION = rf"(?P<subscription>{SEGMENT})"

ROUTES = [
    Route("GET", f"{NAMESPACE}/subscriptionAuthMode", get_auth_mode, Need.TENANT_ADMIN),
    Route(
        "POST",
        f"{NAMESPACE}/subscriptionAuthMode",
        set_auth_mode,
        Need.TENANT_ADMIN,
        "None or Prefix",
    ),
    Route("GET", f"{NAMESPACE}/permissions", get_namespace, Need.TENANT_ADMIN),
    Route("GET", f"{NAMESPACE}/permissions/subscription", get_subscriptions, Need.TENANT_ADMIN),
    Route(
        "POST",
        f"{NAMESPACE}/permissions/subscription/{_SUBSCRIPTION}",
        grant_subscription,
        Need.TENANT_ADMIN,
        "a list of roles",
    ),
    Route(
        "DELETE",
        f"{NAMESPACE}/permissions/{_SUBSCRIPTION}/{ROLE}",
        revoke_subscription,
        Need.TENANT_ADMIN,
    ),
    Route(
        "POST",
        f"{NAMESPACE}/permissions/{ROLE}",
        grant_namespace,
        Need.TENANT_ADMIN,
        "a list of actions",
    ),
    Route("DELETE", f"{NAMESPACE}/permissions/{ROLE}", revoke_namespace, Need.TENANT_ADMIN),
    Route("GET", f"{TOPIC}/permissions", get_topic, Need.TOPIC_ADMIN),
    Route(
        "POST", f"{TOPIC}/permissions/{ROLE}", grant_topic, Need.TOPIC_ADMIN, "a list of actions"
    ),
    Route("DELETE", f"{TOPIC}/permissions/{ROLE}", revoke_topic, Need.TOPIC_ADMIN),
]
"""The endpoints of permissions."""
