"""Authorization of the web port's requests, from what each route of the route table
(:data:`starquake.broker.admin.ROUTES`) needs.

With ``authorizationEnabled`` every request the web server routes is checked here before its
handler runs (see :attr:`starquake.broker.web.WebServer.authorize`). The table says:

- ``/metrics`` and the dashboard's static files need no role here (Pulsar serves metrics
  without authentication by default; the dashboard's page holds no data, and the admin calls
  its script makes are checked like any other). Whether they need credentials at all is the
  authentication's decision;
- the dashboard's summary (``/dashboard/api/...``) needs a role, any role: it holds only what
  that role may read through the admin API;
- the cluster and broker endpoints (health included), the tenant list and tenant creation,
  update and deletion need a super user;
- reading a tenant, and everything under a namespace (its creation and deletion, its
  policies and permissions) needs an admin of the tenant (or a super user);
- listing a namespace's topics: tenant admins, or a role granted ``consume`` on the namespace;
- on a topic, as Pulsar's topic operations: lookups, partition metadata, stats and reading
  schemas need produce or consume; subscriptions (listing, creating, deleting, skipping,
  expiring, resetting, peeking) and reading the last message id or a message need consume;
  the rest (creating, deleting, terminating, unloading, compacting, policies, permissions,
  uploading and deleting schemas) needs a tenant admin.

A path no route serves is answered 404 (:func:`rule_for` says it would need a super user). A
request without a role (no credentials, or authentication off) is answered 401; a role without
the right, 403 with a reason naming what is missing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from starquake.broker import admin
from starquake.broker.security.authorization import TopicOperation
from starquake.broker.web import Authorize, Need, Reply, json_reply
from starquake.common.topic_name import InvalidTopicNameError, TopicName

if TYPE_CHECKING:
    from starquake.broker.security.authorization import AuthorizationService

__all__ = ["Need", "rule_for", "web_authorizer"]

log = logging.getLogger(__name__)


def rule_for(method: str, path: str) -> tuple[Need, dict[str, str]]:
    """What ``method path`` needs, and the resources its path names (domain, tenant,
    namespace, topic, subscription), as the route table says (a path no route serves needs a
    super user)."""
    found = admin.need_of(method, path)
    if found is None:
        return Need.SUPER_USER, {}
    need, names = found
    return need, {k: v for k, v in names.items() if k in _RESOURCES}


_RESOURCES = frozenset({"domain", "tenant", "namespace", "topic", "subscription"})


def _topic(names: dict[str, str]) -> TopicName:
    domain = names.get("domain", "persistent")
    return TopicName.parse(f"{domain}://{names['tenant']}/{names['namespace']}/{names['topic']}")


def _forbidden(reason: str) -> Reply:
    return json_reply(403, {"reason": reason})


def web_authorizer(authorization: AuthorizationService) -> Authorize:
    """The :attr:`~starquake.broker.web.WebServer.authorize` hook of ``authorization`` (the
    server installs it only while authorization is on)."""

    async def authorize(role: str | None, need: Need, names: dict[str, str]) -> Reply | None:
        if need is Need.NOTHING:
            return None
        if role is None:
            return json_reply(401, {"reason": "Authentication required"})
        if authorization.is_super_user(role) or need is Need.ANY_ROLE:
            return None
        refusal = _check(authorization, role, need, names)
        if refusal is not None:
            log.info("role %s refused (%s): %s", role, need.value, refusal)
            return _forbidden(refusal)
        return None

    return authorize


def _check(
    authorization: AuthorizationService, role: str, need: Need, names: dict[str, str]
) -> str | None:
    """Why ``role`` (not a super user) may not do what ``need`` asks, or None if it may."""
    if need is Need.SUPER_USER:
        return f"This operation requires super-user access; role {role!r} is not a super user"
    tenant = names["tenant"]
    if authorization.is_tenant_admin(tenant, role):
        return None
    not_admin = f"role {role!r} is not an admin of tenant {tenant}"
    if need is Need.TENANT_ADMIN or need is Need.TOPIC_ADMIN:
        return f"Don't have permission to administrate resources on this tenant: {not_admin}"
    namespace = f"{tenant}/{names['namespace']}"
    if need is Need.LIST_TOPICS:
        if authorization.can_list_topics(namespace, role):
            return None
        return f"Cannot list the topics of {namespace}: {not_admin} and has no consume permission"
    try:
        topic = _topic(names)
    except InvalidTopicNameError:
        return f"Not authorized on an invalid topic name: {not_admin}"
    if need is Need.TOPIC_LOOKUP:
        if authorization.allow_topic_operation(topic, role, TopicOperation.LOOKUP):
            return None
        return f"Not authorized on topic {topic}: {not_admin} and has neither produce nor consume"
    subscription = names.get("subscription")
    if authorization.allow_topic_operation(topic, role, TopicOperation.CONSUME, subscription):
        return None
    on = f" with subscription {subscription!r}" if subscription else ""
    return f"Not authorized to consume from topic {topic}{on}: {not_admin} and may not consume"
