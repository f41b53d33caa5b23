"""Where :class:`~starquake.broker.resources.PulsarResources` keeps each resource in the
metadata store (values are JSON)::

    /admin/clusters/<cluster>                          {"serviceUrl", "brokerServiceUrl", ...Tls}
    /admin/tenants/<tenant>                            {"adminRoles": [], "allowedClusters": [...]}
    /admin/policies/<tenant>/<namespace>               namespace policies (Pulsar field names)
    /admin/partitioned-topics/<tenant>/<namespace>/<domain>/<local name>   {"partitions": N}
    /admin/topic-policies/<tenant>/<namespace>/<domain>/<local name>       topic-level policies
    /admin/starquake/first-start-defaults              what the broker created at first start
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from starquake.storage import MetadataStore

TENANTS = "/admin/tenants"
POLICIES = "/admin/policies"
PARTITIONED = "/admin/partitioned-topics"
CLUSTERS = "/admin/clusters"
TOPIC_POLICIES = "/admin/topic-policies"
FIRST_START = "/admin/starquake/first-start-defaults"
"""The tenant and namespace the broker created itself at first start and nobody changed since
(``["tenant:public", "namespace:public/default"]``)."""

DEPTHS = {CLUSTERS: 1, TENANTS: 1, POLICIES: 2, PARTITIONED: 4, TOPIC_POLICIES: 4}
"""The roots of the stored resources, and how many path segments below them a key has."""

CONFIGURATION_PREFIXES = (*DEPTHS, FIRST_START.rsplit("/", 1)[0])
"""Every key the resources keep is under one of these."""

TERMINATED = "/admin/terminated"
"""``TERMINATED/<full topic name>``: the last position of a terminated topic (``ledger:entry``)."""
DEDUP_SNAPSHOTS = "/starquake/dedup"
"""``DEDUP_SNAPSHOTS/<quoted full topic name>``: a topic's deduplication snapshot."""
TOPIC_STATE_PREFIXES = (TERMINATED, DEDUP_SNAPSHOTS)
"""The per-topic state kept outside the managed ledger that a topic's next owner reads when it
loads the topic (in cluster mode, in the store all brokers share)."""


def walk(store: MetadataStore, root: str, depth: int) -> Iterator[list[str]]:
    """The path segments below ``root`` of every key ``depth`` segments below it."""
    for child in store.list_children(root):
        if depth == 1:
            yield [child]
        else:
            for rest in walk(store, f"{root}/{child}", depth - 1):
                yield [child, *rest]


def below(path: str) -> tuple[str, list[str]] | None:
    """The root of ``path`` and its segments below it, when it is a resource's key."""
    for root, depth in DEPTHS.items():
        if path.startswith(root + "/"):
            parts = path[len(root) + 1 :].split("/")
            return (root, parts) if len(parts) == depth else None
    return None


def enter(copy: dict[str, Any], name: str, value: Any) -> None:
    """Set ``copy[name]`` to ``value`` (None: remove it)."""
    if value is None:
        copy.pop(name, None)
    else:
        copy[name] = value
