"""``PulsarAdmin``: typed calls to Pulsar's admin REST API (``/admin/v2``) with urllib.

Only the standard library is used, so that a command line built on it starts fast. Every call
returns the JSON value the broker answered (``None`` for an empty body); a refused request
raises :class:`PulsarAdminError` with the HTTP status and the broker's ``reason``, and a broker
that cannot be reached raises :class:`AdminConnectError`.

Topic arguments take Pulsar's short forms: ``my-topic`` is
``persistent://public/default/my-topic``, ``tenant/ns/topic`` is
``persistent://tenant/ns/topic``.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any

from starquake.admin._base import (
    V2,
    Group,
    Names,
    namespace_path,
    quota_query,
    quote,
    topic_path,
    topic_ref,
)
from starquake.admin._operations import (
    Brokers,
    Clusters,
    NamespaceOperations,
    TopicOperations,
)
from starquake.admin._parsing import (
    LATEST,
    parse_message_id,
    parse_relative_seconds,
    parse_size_mb,
)
from starquake.admin._responses import (
    AdminConnectError,
    AdminResponse,
    PeekedMessage,
    PulsarAdminError,
    connect_reason,
    reason_of,
)
from starquake.admin._topic_extras import Schemas, TopicPolicies
from starquake.admin._transactions import Transactions
from starquake.common.tls import client_ssl_context
from starquake.common.topic_name import TopicName

if TYPE_CHECKING:
    from starquake.client.base._auth import Authentication

__all__ = [
    "AdminConnectError",
    "AdminResponse",
    "Brokers",
    "PeekedMessage",
    "PulsarAdmin",
    "PulsarAdminError",
    "TopicRef",
    "parse_message_id",
    "parse_relative_seconds",
    "parse_size_mb",
    "topic_ref",
]

TopicRef = TopicName

Peeked = list[PeekedMessage]


class Tenants(Group):
    """``/admin/v2/tenants``: TenantInfo is ``{"adminRoles": [...], "allowedClusters": [...]}``."""

    def list(self) -> Names:
        """The tenant names."""
        return list(self._call("GET", f"{V2}/tenants"))

    def get(self, tenant: str) -> Any:
        """A tenant's admin roles and allowed clusters."""
        return self._call("GET", f"{V2}/tenants/{quote(tenant)}")

    def create(
        self,
        tenant: str,
        admin_roles: Names | None = None,
        allowed_clusters: Names | None = None,
    ) -> None:
        """Create ``tenant``; without ``allowed_clusters`` it may use every cluster (as
        pulsar-admin does)."""
        clusters = allowed_clusters if allowed_clusters else self._admin.clusters.list()
        info = {"adminRoles": list(admin_roles or []), "allowedClusters": clusters}
        self._call("PUT", f"{V2}/tenants/{quote(tenant)}", info)

    def update(
        self,
        tenant: str,
        admin_roles: Names | None = None,
        allowed_clusters: Names | None = None,
    ) -> None:
        """Change the fields given; the others keep their current values."""
        current = self.get(tenant)
        info = dict(current) if isinstance(current, dict) else {}
        if admin_roles is not None:
            info["adminRoles"] = list(admin_roles)
        if allowed_clusters is not None:
            info["allowedClusters"] = list(allowed_clusters)
        self._call("POST", f"{V2}/tenants/{quote(tenant)}", info)

    def delete(self, tenant: str) -> None:
        """Delete a tenant that has no namespaces."""
        self._call("DELETE", f"{V2}/tenants/{quote(tenant)}")


class Namespaces(NamespaceOperations):
    """``/admin/v2/namespaces``: namespaces are ``tenant/namespace``."""

    def list(self, tenant: str) -> Names:
        """The namespaces of ``tenant``."""
        return list(self._call("GET", f"{V2}/namespaces/{quote(tenant)}"))

    def create(self, namespace: str) -> None:
        """Create a namespace."""
        self._call("PUT", f"{V2}/namespaces/{namespace_path(namespace)}")

    def delete(self, namespace: str) -> None:
        """Delete a namespace that has no topics."""
        self._call("DELETE", f"{V2}/namespaces/{namespace_path(namespace)}")

    def policies(self, namespace: str) -> Any:
        """All the policies of a namespace."""
        return self._call("GET", f"{V2}/namespaces/{namespace_path(namespace)}")

    def _policy(self, namespace: str, policy: str) -> str:
        return f"{V2}/namespaces/{namespace_path(namespace)}/{policy}"

    def get_retention(self, namespace: str) -> Any:
        """The retention: time in minutes and size in MB."""
        return self._call("GET", self._policy(namespace, "retention"))

    def set_retention(self, namespace: str, time_minutes: int, size_mb: int) -> None:
        """Keep acknowledged messages this long / up to this size (-1: no limit)."""
        body = {"retentionTimeInMinutes": time_minutes, "retentionSizeInMB": size_mb}
        self._call("POST", self._policy(namespace, "retention"), body)

    def remove_retention(self, namespace: str) -> None:
        """Remove the retention (the broker's default applies)."""
        self._call("DELETE", self._policy(namespace, "retention"))

    def get_message_ttl(self, namespace: str) -> Any:
        """The message TTL in seconds."""
        return self._call("GET", self._policy(namespace, "messageTTL"))

    def set_message_ttl(self, namespace: str, seconds: int) -> None:
        """Expire messages left unacknowledged longer than ``seconds``."""
        self._call("POST", self._policy(namespace, "messageTTL"), seconds)

    def remove_message_ttl(self, namespace: str) -> None:
        """Remove the message TTL (the broker's default applies)."""
        self._call("DELETE", self._policy(namespace, "messageTTL"))

    def get_deduplication(self, namespace: str) -> Any:
        """Whether deduplication is on (None: the broker's default applies)."""
        return self._call("GET", self._policy(namespace, "deduplication"))

    def set_deduplication(self, namespace: str, enabled: bool) -> None:
        """Turn message deduplication on or off."""
        self._call("POST", self._policy(namespace, "deduplication"), enabled)

    def remove_deduplication(self, namespace: str) -> None:
        """Remove the deduplication setting (the broker's default applies)."""
        self._call("DELETE", self._policy(namespace, "deduplication"))

    # Any other policy by its path (Pulsar's names: maxUnackedMessagesPerConsumer,
    # maxUnackedMessagesPerSubscription, delayedDelivery, compactionThreshold,
    # inactiveTopicPolicies, maxProducersPerTopic, maxConsumersPerTopic, ...).

    def get_policy(self, namespace: str, policy: str) -> Any:
        """The namespace's value (None: the broker's default applies)."""
        return self._call("GET", self._policy(namespace, policy))

    def set_policy(self, namespace: str, policy: str, value: Any) -> None:
        """Set the namespace's value of ``policy``."""
        method = "PUT" if policy in _PUT_POLICIES else "POST"
        self._call(method, self._policy(namespace, policy), value)

    def remove_policy(self, namespace: str, policy: str) -> None:
        """Remove the namespace's value of ``policy``."""
        self._call("DELETE", self._policy(namespace, policy))

    def get_backlog_quotas(self, namespace: str) -> Any:
        """``{"destination_storage" | "message_age": {"limitSize", "limitTime", "policy"}}``."""
        return self._call("GET", self._policy(namespace, "backlogQuotaMap"))

    def set_backlog_quota(
        self, namespace: str, quota: dict[str, Any], quota_type: str = "destination_storage"
    ) -> None:
        """Set the backlog quota of ``quota_type``."""
        path = self._policy(namespace, "backlogQuota") + quota_query(quota_type)
        self._call("POST", path, quota)

    def remove_backlog_quota(self, namespace: str, quota_type: str = "destination_storage") -> None:
        """Remove the backlog quota of ``quota_type``."""
        self._call("DELETE", self._policy(namespace, "backlogQuota") + quota_query(quota_type))

    # Permissions: actions are produce, consume, functions, sources, sinks, packages.

    def permissions(self, namespace: str) -> Any:
        """``{role: [action, ...]}`` granted on the namespace."""
        return self._call("GET", self._policy(namespace, "permissions"))

    def grant_permission(self, namespace: str, role: str, actions: Names) -> None:
        """Let ``role`` do ``actions`` on every topic of the namespace (replacing its grant)."""
        self._call("POST", self._policy(namespace, f"permissions/{quote(role)}"), list(actions))

    def revoke_permission(self, namespace: str, role: str) -> None:
        """Take back the actions granted to ``role``."""
        self._call("DELETE", self._policy(namespace, f"permissions/{quote(role)}"))

    def subscription_permissions(self, namespace: str) -> Any:
        """``{subscription: [role, ...]}``: the roles each listed subscription is limited to."""
        return self._call("GET", self._policy(namespace, "permissions/subscription"))

    def grant_subscription_permission(
        self, namespace: str, subscription: str, roles: Names
    ) -> None:
        """Let only ``roles`` consume with ``subscription`` on the namespace's topics."""
        path = self._policy(namespace, f"permissions/subscription/{quote(subscription)}")
        self._call("POST", path, list(roles))

    def revoke_subscription_permission(self, namespace: str, subscription: str, role: str) -> None:
        """Remove ``role`` from those allowed to use ``subscription``."""
        path = self._policy(namespace, f"permissions/{quote(subscription)}/{quote(role)}")
        self._call("DELETE", path)


class Topics(TopicOperations):
    """``/admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}``."""

    def list(self, namespace: str) -> Names:
        """Every topic of ``namespace``, persistent then non-persistent (partitions of a
        partitioned topic one by one)."""
        path = namespace_path(namespace)
        names = list(self._call("GET", f"{V2}/persistent/{path}"))
        names += list(self._call("GET", f"{V2}/non-persistent/{path}"))
        return names

    def list_partitioned(self, namespace: str) -> Names:
        """The partitioned topics of ``namespace`` (persistent then non-persistent)."""
        path = namespace_path(namespace)
        names = list(self._call("GET", f"{V2}/persistent/{path}/partitioned"))
        names += list(self._call("GET", f"{V2}/non-persistent/{path}/partitioned"))
        return names

    def create(self, topic: str) -> None:
        """Create a non-partitioned topic."""
        self._call("PUT", topic_path(topic))

    def delete(self, topic: str, force: bool = False) -> None:
        """Delete a non-partitioned topic (or one partition)."""
        suffix = "?force=true" if force else ""
        self._call("DELETE", topic_path(topic) + suffix)

    def create_partitioned(self, topic: str, partitions: int) -> None:
        """Create a topic of ``partitions`` partitions."""
        self._call("PUT", topic_path(topic) + "/partitions", partitions)

    def update_partitioned(self, topic: str, partitions: int) -> None:
        """Raise a partitioned topic's number of partitions."""
        self._call("POST", topic_path(topic) + "/partitions", partitions)

    def partitioned_metadata(self, topic: str) -> Any:
        """``{"partitions": N}`` (0 for a topic that is not partitioned)."""
        return self._call("GET", topic_path(topic) + "/partitions")

    def delete_partitioned(self, topic: str, force: bool = False) -> None:
        """Delete a partitioned topic and its partitions."""
        suffix = "?force=true" if force else ""
        self._call("DELETE", topic_path(topic) + "/partitions" + suffix)

    def stats(self, topic: str, get_precise_backlog: bool = False, earliest: bool = False) -> Any:
        """Pulsar's TopicStats (msgRateIn, msgInCounter, publishers, subscriptions, ...);
        ``get_precise_backlog`` asks for backlogs counted exactly, ``earliest`` for the
        publish time of each subscription's first unacknowledged message."""
        wanted = {"getPreciseBacklog": get_precise_backlog, "getEarliestTimeInBacklog": earliest}
        query = "&".join(f"{name}=true" for name, on in wanted.items() if on)
        return self._call("GET", topic_path(topic) + "/stats" + (f"?{query}" if query else ""))

    def internal_stats(self, topic: str) -> Any:
        """Pulsar's PersistentTopicInternalStats (ledgers, cursors, ...)."""
        return self._call("GET", topic_path(topic) + "/internalStats")

    def partitioned_stats(self, topic: str, per_partition: bool = True) -> Any:
        """A partitioned topic's stats, summed (and per partition)."""
        query = "" if per_partition else "?perPartition=false"
        return self._call("GET", topic_path(topic) + "/partitioned-stats" + query)

    def last_message_id(self, topic: str) -> Any:
        """The id of the topic's last message."""
        return self._call("GET", topic_path(topic) + "/lastMessageId")

    def terminate(self, topic: str) -> Any:
        """Seal the topic: no more messages may be published; answers the last message id."""
        return self._call("POST", topic_path(topic) + "/terminate")

    def unload(self, topic: str) -> None:
        """Unload the topic (its clients reconnect)."""
        self._call("PUT", topic_path(topic) + "/unload")

    def trigger_compaction(self, topic: str) -> None:
        """Start compacting the topic (every partition of a partitioned topic)."""
        self._call("PUT", topic_path(topic) + "/compaction")

    def compaction_status(self, topic: str) -> Any:
        """``{"status": "NOT_RUN" | "RUNNING" | "SUCCESS" | "ERROR", "lastError": ...}``."""
        return self._call("GET", topic_path(topic) + "/compaction")

    def permissions(self, topic: str) -> Any:
        """The topic's effective grants: the namespace's, with the topic's added."""
        return self._call("GET", topic_path(topic) + "/permissions")

    def grant_permission(self, topic: str, role: str, actions: Names) -> None:
        """Let ``role`` do ``actions`` on the topic (every partition of a partitioned one)."""
        self._call("POST", f"{topic_path(topic)}/permissions/{quote(role)}", list(actions))

    def revoke_permission(self, topic: str, role: str) -> None:
        """Take back the actions granted to ``role`` on the topic itself."""
        self._call("DELETE", f"{topic_path(topic)}/permissions/{quote(role)}")


class Subscriptions(Group):
    """A topic's subscriptions: ``.../{topic}/subscriptions`` and ``.../subscription/{sub}``."""

    @staticmethod
    def _path(topic: str, subscription: str) -> str:
        return f"{topic_path(topic)}/subscription/{quote(subscription)}"

    def list(self, topic: str) -> Names:
        """The subscription names of a topic."""
        return list(self._call("GET", topic_path(topic) + "/subscriptions"))

    def create(
        self, topic: str, subscription: str, message_id: tuple[int, int] | None = None
    ) -> None:
        """Create a durable subscription at ``message_id`` (default: the end of the topic)."""
        body = None
        if message_id is not None and message_id != LATEST:
            body = {"ledgerId": message_id[0], "entryId": message_id[1]}
        self._call("PUT", self._path(topic, subscription), body)

    def delete(self, topic: str, subscription: str, force: bool = False) -> None:
        """Delete a subscription (``force``: even with consumers)."""
        suffix = "?force=true" if force else ""
        self._call("DELETE", self._path(topic, subscription) + suffix)

    def skip(self, topic: str, subscription: str, count: int) -> None:
        """Acknowledge the next ``count`` messages of a subscription."""
        self._call("POST", f"{self._path(topic, subscription)}/skip/{count}")

    def clear_backlog(self, topic: str, subscription: str) -> None:
        """Acknowledge every message of a subscription's backlog."""
        self._call("POST", f"{self._path(topic, subscription)}/skip_all")

    def reset_cursor_to_time(self, topic: str, subscription: str, timestamp_ms: int) -> None:
        """Move the subscription to the first message published at or after the time."""
        self._call("POST", f"{self._path(topic, subscription)}/resetcursor/{timestamp_ms}")

    def reset_cursor_to_message_id(
        self, topic: str, subscription: str, message_id: tuple[int, int]
    ) -> None:
        """Move a subscription to a message id."""
        body = {"ledgerId": message_id[0], "entryId": message_id[1]}
        self._call("POST", f"{self._path(topic, subscription)}/resetcursor", body)

    def expire_messages(self, topic: str, subscription: str, seconds: int) -> None:
        """Acknowledge every message older than ``seconds``."""
        self._call("POST", f"{self._path(topic, subscription)}/expireMessages/{seconds}")

    def peek(self, topic: str, subscription: str, count: int) -> Peeked:
        """The first ``count`` messages of the subscription's backlog, left in place; fewer
        when the backlog is shorter (a broker answers 404 past its end)."""
        messages: list[PeekedMessage] = []
        for position in range(1, count + 1):
            path = f"{self._path(topic, subscription)}/position/{position}"
            try:
                response = self._admin.request("GET", path)
            except PulsarAdminError as exc:
                if exc.status == 404 and messages:
                    break
                raise
            messages.append(PeekedMessage.of(response))
        return messages


# namespace policies set with PUT (every other one is set with POST)
_PUT_POLICIES = frozenset({"compactionThreshold", "schemaCompatibilityStrategy"})


class PulsarAdmin:
    """The admin API of the broker at ``url`` (``http://host:port`` or ``https://host:port``,
    default ``http://localhost:8080``).

    Over HTTPS the broker's certificate must chain to ``tls_trust_certs_file_path`` (default:
    the system's CAs); ``tls_validate_hostname`` also checks its host name;
    ``tls_allow_insecure_connection`` checks nothing; ``tls_certificate_file_path`` and
    ``tls_private_key_file_path`` give a client certificate (TLS authentication).

    ``authentication`` (a ``starquake.client`` ``AuthenticationToken``, ``AuthenticationBasic``
    or ``AuthenticationTLS``) adds its ``Authorization`` header to every request (an
    ``AuthenticationTLS`` gives the client certificate)."""

    def __init__(
        self,
        url: str = "http://localhost:8080",
        *,
        timeout: float = 30.0,
        tls_trust_certs_file_path: str | None = None,
        tls_allow_insecure_connection: bool = False,
        tls_validate_hostname: bool = False,
        tls_certificate_file_path: str | None = None,
        tls_private_key_file_path: str | None = None,
        authentication: Authentication | None = None,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.authentication = authentication
        identity = authentication.tls_certificate_paths if authentication is not None else None
        if identity is not None:
            tls_certificate_file_path, tls_private_key_file_path = identity
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"invalid admin URL {url!r}: expected http://host:port")
        self.url = url.rstrip("/")
        self.timeout = timeout
        # An admin URL names the broker itself: never send it through a proxy.
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if parsed.scheme == "https":
            context = client_ssl_context(
                trust_certs_file_path=tls_trust_certs_file_path,
                allow_insecure_connection=tls_allow_insecure_connection,
                validate_hostname=tls_validate_hostname,
                certificate_file_path=tls_certificate_file_path,
                private_key_file_path=tls_private_key_file_path,
            )
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self._opener = urllib.request.build_opener(*handlers)
        self.last_response: AdminResponse | None = None
        self.brokers = Brokers(self)
        self.clusters = Clusters(self)
        self.tenants = Tenants(self)
        self.namespaces = Namespaces(self)
        self.topics = Topics(self)
        self.subscriptions = Subscriptions(self)
        self.schemas = Schemas(self)
        self.topic_policies = TopicPolicies(self)
        self.transactions = Transactions(self)

    def request(self, method: str, path: str, body: Any = None) -> AdminResponse:
        """Send ``method path`` (a non-bytes ``body`` as JSON) and return the answer; raise
        PulsarAdminError for a 4xx/5xx status and AdminConnectError when unreachable.

        The answer is also kept as :attr:`last_response`, for callers that pass the broker's
        body on unchanged.
        """
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        url = f"{self.url}{path}"
        headers = {"Accept": "application/json"}
        if self.authentication is not None:
            headers.update(self.authentication.http_headers())
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with self._opener.open(request, timeout=self.timeout) as reply:
                response = AdminResponse(reply.status, list(reply.headers.items()), reply.read())
        except urllib.error.HTTPError as exc:
            error_body = exc.read()
            self.last_response = AdminResponse(exc.code, list(exc.headers.items()), error_body)
            raise PulsarAdminError(
                method, url, exc.code, reason_of(error_body, exc.reason or "error")
            ) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            raise AdminConnectError(self.url, connect_reason(exc)) from None
        self.last_response = response
        return response
