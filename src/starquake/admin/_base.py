"""What the admin client's groups share: API paths and the request helper."""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING, Any

from starquake.common.topic_name import TopicName, parse_namespace

if TYPE_CHECKING:
    from starquake.admin.client import PulsarAdmin

V2 = "/admin/v2"

Names = list[str]


def topic_ref(name: str) -> TopicName:
    """The full topic name of ``name`` (short forms allowed); ValueError if malformed."""
    return TopicName.parse(name)


def quote(segment: str) -> str:
    """``segment`` quoted for one path segment."""
    return urllib.parse.quote(segment, safe="")


def topic_path(topic: str | TopicName) -> str:
    """``/admin/v2/{domain}/{tenant}/{namespace}/{topic}`` of a topic."""
    name = topic if isinstance(topic, TopicName) else topic_ref(topic)
    return (
        f"{V2}/{name.domain.value}/{quote(name.tenant)}/{quote(name.namespace)}"
        f"/{quote(name.local_name)}"
    )


def namespace_path(namespace: str) -> str:
    """``tenant/namespace`` quoted for a path."""
    tenant, ns = parse_namespace(namespace)
    return f"{quote(tenant)}/{quote(ns)}"


def quota_query(quota_type: str) -> str:
    """The query naming a backlog quota's type."""
    return "?backlogQuotaType=" + quote(quota_type)


class Group:
    """A group of calls of one :class:`PulsarAdmin`."""

    def __init__(self, admin: PulsarAdmin) -> None:
        self._admin = admin

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        return self._admin.request(method, path, body).json()
