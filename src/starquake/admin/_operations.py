"""Admin calls on brokers, and the operations of clusters, namespaces and topics that go beyond
their metadata (lookups, reading messages by id or position, truncation, unloading)."""

from __future__ import annotations

from typing import Any

from starquake.admin._base import V2, Group, Names, namespace_path, quote, topic_path, topic_ref
from starquake.admin._responses import PeekedMessage


class Brokers(Group):
    """``/admin/v2/brokers``."""

    def list(self, cluster: str) -> Names:
        """The web addresses (``host:port``) of the cluster's brokers."""
        return list(self._call("GET", f"{V2}/brokers/{quote(cluster)}"))

    def leader_broker(self) -> dict[str, Any]:
        """The leader broker: ``{"serviceUrl", "brokerId"}``."""
        return dict(self._call("GET", f"{V2}/brokers/leaderBroker"))

    def healthcheck(self) -> str:
        """``ok`` when the broker is healthy (PulsarAdminError otherwise)."""
        return self._admin.request("GET", f"{V2}/brokers/health").body.decode().strip()

    def dynamic_config_names(self) -> Names:
        """The settings that can be changed while the broker runs."""
        return list(self._call("GET", f"{V2}/brokers/configuration"))

    def dynamic_config_values(self) -> dict[str, str]:
        """The values of the settings changed while the broker runs."""
        return dict(self._call("GET", f"{V2}/brokers/configuration/values"))

    def runtime_config(self) -> dict[str, str]:
        """Every setting as the broker was configured (secrets masked)."""
        return dict(self._call("GET", f"{V2}/brokers/configuration/runtime"))


class Clusters(Group):
    """``/admin/v2/clusters``: ClusterData is ``{"serviceUrl", "serviceUrlTls",
    "brokerServiceUrl", "brokerServiceUrlTls", "proxyServiceUrl", "proxyProtocol"}``."""

    def list(self) -> Names:
        """The cluster names."""
        return list(self._call("GET", f"{V2}/clusters"))

    def get(self, cluster: str) -> Any:
        """A cluster's data (service URLs)."""
        return self._call("GET", f"{V2}/clusters/{quote(cluster)}")

    def create(self, cluster: str, data: dict[str, Any]) -> None:
        """Create a cluster."""
        self._call("PUT", f"{V2}/clusters/{quote(cluster)}", data)

    def update(self, cluster: str, data: dict[str, Any]) -> None:
        """Replace a cluster's data."""
        self._call("POST", f"{V2}/clusters/{quote(cluster)}", data)

    def delete(self, cluster: str) -> None:
        """Forget a cluster that no tenant allows."""
        self._call("DELETE", f"{V2}/clusters/{quote(cluster)}")


class NamespaceOperations(Group):
    """Operations on every topic of a namespace."""

    def topics(self, namespace: str, mode: str = "PERSISTENT") -> Names:
        """The namespace's topics (``mode``: PERSISTENT, NON_PERSISTENT or ALL)."""
        path = f"{V2}/namespaces/{namespace_path(namespace)}/topics?mode={quote(mode)}"
        return list(self._call("GET", path))

    def unload(self, namespace: str, bundle: str | None = None) -> None:
        """Unload every topic of the namespace, or of one ``bundle`` of it (their clients
        reconnect)."""
        path = f"{V2}/namespaces/{namespace_path(namespace)}"
        if bundle is not None:
            path += f"/{quote(bundle)}"
        self._call("PUT", path + "/unload")

    def split_bundle(
        self, namespace: str, bundle: str, algorithm: str = "range_equally_divide"
    ) -> None:
        """Split ``bundle`` of the namespace in two at the middle of its range."""
        path = f"{V2}/namespaces/{namespace_path(namespace)}/{quote(bundle)}/split"
        self._call("PUT", f"{path}?splitAlgorithmName={quote(algorithm)}")

    def bundles(self, namespace: str) -> dict[str, Any]:
        """The namespace's bundles: ``{"boundaries": [...], "numBundles": n}``."""
        return dict(self._call("GET", f"{V2}/namespaces/{namespace_path(namespace)}/bundles"))

    def clear_backlog(self, namespace: str, subscription: str | None = None) -> None:
        """Acknowledge every message of every subscription (or of the subscriptions named
        ``subscription``) on the namespace's topics."""
        path = f"{V2}/namespaces/{namespace_path(namespace)}/clearBacklog"
        if subscription is not None:
            path += f"/{quote(subscription)}"
        self._call("POST", path)


class TopicOperations(Group):
    """Lookups, messages by id or position, truncation and expiry of a topic."""

    def lookup(self, topic: str) -> Any:
        """The broker serving ``topic``: ``{"brokerUrl", "brokerUrlTls", "httpUrl", ...}``."""
        name = topic_ref(topic)
        path = (
            f"/lookup/v2/topic/{name.domain.value}/{quote(name.tenant)}"
            f"/{quote(name.namespace)}/{quote(name.local_name)}"
        )
        return self._call("GET", path)

    def partitioned_lookup(self, topic: str) -> dict[str, str]:
        """The broker URL of each partition (of the topic itself if it has none)."""
        name = topic_ref(topic)
        count = int(self._call("GET", topic_path(name) + "/partitions").get("partitions", 0))
        names = [name.partition(i) for i in range(count)] if count else [name]
        return {str(n): str(self.lookup(str(n)).get("brokerUrl", "")) for n in names}

    def message_by_id(self, topic: str, ledger_id: int, entry_id: int) -> PeekedMessage:
        """The message stored at ``ledger_id:entry_id``."""
        path = f"{topic_path(topic)}/ledger/{ledger_id}/entry/{entry_id}"
        return PeekedMessage.of(self._admin.request("GET", path))

    def message_id_by_timestamp(self, topic: str, timestamp_ms: int) -> Any:
        """The id of the first message published at or after ``timestamp_ms``."""
        return self._call("GET", f"{topic_path(topic)}/messageid/{timestamp_ms}")

    def examine_message(self, topic: str, initial_position: str, position: int) -> PeekedMessage:
        """The ``position``-th message from the earliest, or back from the latest."""
        path = (
            f"{topic_path(topic)}/examinemessage?initialPosition={quote(initial_position)}"
            f"&messagePosition={position}"
        )
        return PeekedMessage.of(self._admin.request("GET", path))

    def truncate(self, topic: str) -> None:
        """Move every subscription to the end and delete the data nothing reads any more."""
        self._call("DELETE", topic_path(topic) + "/truncate")

    def expire_messages_all_subscriptions(self, topic: str, seconds: int) -> None:
        """Acknowledge on every subscription the messages older than ``seconds``."""
        self._call("POST", f"{topic_path(topic)}/all_subscription/expireMessages/{seconds}")

    def partitioned_internal_stats(self, topic: str) -> Any:
        """``{"metadata": {"partitions": N}, "partitions": {name: internal stats}}``."""
        return self._call("GET", topic_path(topic) + "/partitioned-internalStats")
