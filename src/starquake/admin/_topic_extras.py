"""Admin calls on one topic's policies and on its schemas."""

from __future__ import annotations

from typing import Any

from starquake.admin._base import V2, Group, quota_query, quote, topic_path
from starquake.common.topic_name import TopicName


class TopicPolicies(Group):
    """Policies set on one topic (those of a partitioned topic apply to every partition):
    ``.../{topic}/{policy}`` with Pulsar's policy names (``retention``, ``messageTTL``,
    ``deduplicationEnabled``, ``maxUnackedMessagesOnConsumer``,
    ``maxUnackedMessagesOnSubscription``, ``delayedDelivery``, ``compactionThreshold``,
    ``maxProducers``, ``maxConsumers``, ``inactiveTopicPolicies``).

    ``get`` answers the topic's own value (None when it sets none), or with ``applied`` the
    value in force: the topic's, else its namespace's, else the broker's default.
    """

    def get(self, topic: str, policy: str, applied: bool = False) -> Any:
        """The topic's value of ``policy`` (``applied``: the value in force)."""
        query = "?applied=true" if applied else ""
        return self._call("GET", f"{topic_path(topic)}/{policy}{query}")

    def set(self, topic: str, policy: str, value: Any) -> None:
        """Set the topic's value of ``policy``."""
        path = f"{topic_path(topic)}/{policy}"
        if policy == "messageTTL":  # a query parameter, as Pulsar's admin client sends it
            self._call("POST", f"{path}?messageTTL={int(value)}")
        else:
            self._call("POST", path, value)

    def remove(self, topic: str, policy: str) -> None:
        """Remove the topic's value of ``policy``."""
        self._call("DELETE", f"{topic_path(topic)}/{policy}")

    def get_backlog_quotas(self, topic: str, applied: bool = False) -> Any:
        """``{"destination_storage" | "message_age": {"limitSize", "limitTime", "policy"}}``."""
        return self.get(topic, "backlogQuotaMap", applied)

    def set_backlog_quota(
        self, topic: str, quota: dict[str, Any], quota_type: str = "destination_storage"
    ) -> None:
        """Set the topic's backlog quota of ``quota_type``."""
        self._call("POST", f"{topic_path(topic)}/backlogQuota{quota_query(quota_type)}", quota)

    def remove_backlog_quota(self, topic: str, quota_type: str = "destination_storage") -> None:
        """Remove the topic's backlog quota of ``quota_type``."""
        self._call("DELETE", f"{topic_path(topic)}/backlogQuota{quota_query(quota_type)}")


class Schemas(Group):
    """``/admin/v2/schemas/{tenant}/{namespace}/{topic}``: a topic's schema versions.

    A schema payload is Pulsar's ``{"type": "AVRO", "schema": "<definition>", "properties":
    {}}``; answers are ``{"version", "type", "timestamp", "data", "properties"}``.
    """

    @staticmethod
    def _path(topic: str) -> str:
        name = TopicName.parse(topic).partitioned_topic_name
        parts = (name.tenant, name.namespace, name.local_name)
        return f"{V2}/schemas/" + "/".join(quote(p) for p in parts)

    def get(self, topic: str, version: int | None = None) -> Any:
        """The latest schema of ``topic``, or version ``version``."""
        suffix = "" if version is None else f"/{int(version)}"
        return self._call("GET", f"{self._path(topic)}/schema{suffix}")

    def versions(self, topic: str) -> Any:
        """Every version since the last deletion, oldest first."""
        return self._call("GET", f"{self._path(topic)}/versions")["getSchemaResponses"]

    def upload(self, topic: str, payload: dict[str, Any]) -> int:
        """Register ``payload`` (if compatible); returns its version."""
        reply = self._call("POST", f"{self._path(topic)}/schema", payload)
        return int(reply["version"]["version"])

    def delete(self, topic: str, force: bool = False) -> None:
        """Delete the topic's schema (``force``: every version, for good)."""
        suffix = "?force=true" if force else ""
        self._call("DELETE", f"{self._path(topic)}/schema{suffix}")

    def compatibility(self, topic: str, payload: dict[str, Any]) -> Any:
        """Whether ``payload`` could be registered: ``{"isCompatibility", ...}``."""
        return self._call("POST", f"{self._path(topic)}/compatibility", payload)
