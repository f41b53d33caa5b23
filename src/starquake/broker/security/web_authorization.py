"""Authorization of the web port's requests: one table maps each path to what it needs.

With ``authorizationEnabled`` every request the web server routes is checked here before its
handler runs (see :attr:`starquake.broker.web.WebServer.authorize`):

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

A path the table does not know needs a super user. A request without a role (no credentials,
or authentication off) is answered 401; a role without the right, 403 with a reason naming
what is missing.
"""

from __future__ import annotations

import enum
import logging
import re
from typing import TYPE_CHECKING

from starquake.broker.security.authorization import TopicOperation
from starquake.broker.web import Authorize, Reply, json_reply
from starquake.common.topic_name import InvalidTopicNameError, TopicName

if TYPE_CHECKING:
    from starquake.broker.security.authorization import AuthorizationService

__all__ = ["RULES", "Need", "rule_for", "web_authorizer"]

log = logging.getLogger(__name__)


class Need(enum.Enum):
    """What a web request needs."""

    NOTHING = "nothing"
    ANY_ROLE = "any role"
    SUPER_USER = "super user"
    TENANT_ADMIN = "tenant admin"
    LIST_TOPICS = "list topics"
    TOPIC_LOOKUP = "lookup"
    TOPIC_CONSUME = "consume"
    TOPIC_ADMIN = "topic admin"


_S = r"[^/]+"
_T = rf"(?P<tenant>{_S})"
_NS = rf"(?P<namespace>{_S})"
_DOMAIN = r"(?P<domain>persistent|non-persistent)"
_TOPIC = rf"/admin/v2/{_DOMAIN}/{_T}/{_NS}/(?P<topic>{_S})"
_SCHEMA = rf"/admin/v2/schemas/{_T}/{_NS}/(?P<topic>{_S})"
_SUB = rf"(?P<subscription>{_S})"
_ANY = frozenset({"GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "OPTIONS"})
_GET = frozenset({"GET", "HEAD"})

RULES: list[tuple[frozenset[str], re.Pattern[str], Need]] = [
    (methods, re.compile(pattern), need)
    for methods, pattern, need in [
        (_GET, r"/metrics/?", Need.NOTHING),
        (_GET, r"/", Need.NOTHING),
        (_GET, r"/status\.html", Need.NOTHING),
        (_GET, r"/dashboard/[^/]+", Need.NOTHING),
        (_GET, r"/dashboard/api/[^/]+", Need.ANY_ROLE),
        (_ANY, r"/admin/v2/(clusters|brokers)(/.*)?", Need.SUPER_USER),
        (_ANY, r"/admin/v2/tenants", Need.SUPER_USER),
        (_GET, rf"/admin/v2/tenants/{_T}", Need.TENANT_ADMIN),
        (_ANY, rf"/admin/v2/tenants/{_T}", Need.SUPER_USER),
        (_GET, rf"/admin/v2/namespaces/{_T}/{_NS}/topics", Need.LIST_TOPICS),
        (_ANY, rf"/admin/v2/namespaces/{_T}(/.*)?", Need.TENANT_ADMIN),
        (_GET, rf"/admin/v2/{_DOMAIN}/{_T}/{_NS}(/partitioned)?", Need.LIST_TOPICS),
        (_GET, rf"/lookup/v2/topic/{_DOMAIN}/{_T}/{_NS}/(?P<topic>{_S})", Need.TOPIC_LOOKUP),
        (
            _GET,
            rf"{_TOPIC}/(partitions|stats|partitioned-stats|internalStats|partitioned-internalStats)",
            Need.TOPIC_LOOKUP,
        ),
        (
            _GET,
            rf"{_TOPIC}/(subscriptions|lastMessageId|entryCounts|ledger/.*)",
            Need.TOPIC_CONSUME,
        ),
        (_ANY, rf"{_TOPIC}/subscription/{_SUB}(/.*)?", Need.TOPIC_CONSUME),
        (_ANY, rf"{_TOPIC}(/.*)?", Need.TOPIC_ADMIN),
        (_GET, rf"{_SCHEMA}/(schema(/[^/]+)?|versions)", Need.TOPIC_LOOKUP),
        (frozenset({"POST"}), rf"{_SCHEMA}/(compatibility|version)", Need.TOPIC_LOOKUP),
        (_ANY, rf"{_SCHEMA}(/.*)?", Need.TOPIC_ADMIN),
    ]
]
"""(methods, path pattern, need), first match wins; a path none matches needs a super user."""


def rule_for(method: str, path: str) -> tuple[Need, dict[str, str]]:
    """What ``method path`` needs, and the names its path gives (tenant, namespace, ...)."""
    for methods, pattern, need in RULES:
        if method in methods:
            match = pattern.fullmatch(path)
            if match is not None:
                return need, {k: v for k, v in match.groupdict().items() if v is not None}
    return Need.SUPER_USER, {}


def _topic(names: dict[str, str]) -> TopicName:
    domain = names.get("domain", "persistent")
    return TopicName.parse(f"{domain}://{names['tenant']}/{names['namespace']}/{names['topic']}")


def _forbidden(reason: str) -> Reply:
    return json_reply(403, {"reason": reason})


def web_authorizer(authorization: AuthorizationService) -> Authorize:
    """The :attr:`~starquake.broker.web.WebServer.authorize` hook of ``authorization`` (the
    server installs it only while authorization is on)."""

    async def authorize(
        role: str | None, method: str, path: str, _params: dict[str, str]
    ) -> Reply | None:
        need, names = rule_for(method, path)
        if need is Need.NOTHING:
            return None
        if role is None:
            return json_reply(401, {"reason": "Authentication required"})
        if authorization.is_super_user(role) or need is Need.ANY_ROLE:
            return None
        refusal = _check(authorization, role, need, names)
        if refusal is not None:
            log.info("role %s refused %s %s: %s", role, method, path, refusal)
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
