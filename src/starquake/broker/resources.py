"""Tenants, namespaces and partitioned-topic metadata, kept in the metadata store.

Reads are served from an in-memory copy loaded at start-up, so lookups never touch the store.
Writes go to the store first (callers run them off the event loop: the store fsyncs, or a
shared store answers over the network) and then to the copy; creations and policy updates are
compare-and-set writes, so brokers sharing the store never overwrite each other's. With a
shared configuration store, what other brokers change reaches the copy through
:meth:`PulsarResources.refresh` (see :mod:`starquake.broker.config_sync`). The keys are in
:mod:`starquake.broker.resource_keys`.

What the broker creates at first start (its cluster, tenant ``public``, namespace
``public/default``) yields to the first explicit creation through the admin API, which then
succeeds instead of answering 409: Pulsar's standalone creates them only once fully started,
so a provisioning script that waits for the web port creates them first with its own roles
and policies, and such a script must work unchanged here.

Topic-level policies are kept under the topic's base name: those of a partitioned topic apply to
every partition. They use the same field names as namespace policies.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from starquake.broker import resource_keys as keys
from starquake.broker.config_ranges import MAX_PARTITIONS
from starquake.broker.errors import BrokerServiceError, MetadataError
from starquake.broker.policy_types import NO_POLICIES, Policies
from starquake.broker.urls import BrokerUrls
from starquake.common.topic_name import TopicName
from starquake.protocol.errors import ServerError
from starquake.storage import ABSENT, BadVersionError, MetadataStore

log = logging.getLogger(__name__)

_UPDATE_ATTEMPTS = 10
"""Compare-and-set attempts of a policies update before it gives up."""
_SET_BY_ADMIN = "starquakeSetByAdmin"
"""Marks the stored data of a cluster created or updated through the admin API; without it,
this broker's own cluster is the broker's, which keeps its URLs current at each start."""


class ConflictError(BrokerServiceError):
    """The resource already exists (HTTP 409 in the admin API)."""

    code = ServerError.MetadataError


class NotFoundError(BrokerServiceError):
    """The resource does not exist (HTTP 404 in the admin API)."""

    code = ServerError.TopicNotFound


class UnprocessableError(BrokerServiceError):
    """A well-formed request that cannot be carried out (HTTP 422 in the admin API)."""

    code = ServerError.MetadataError


def _stored_count(name: str, raw: bytes) -> int:
    """The partition count stored for ``name``, at most MAX_PARTITIONS: an earlier version
    accepted any count, and a billion partitions cannot be listed or served."""
    count = int(json.loads(raw)["partitions"])
    if count > MAX_PARTITIONS:
        log.error(
            "partitioned topic %s is stored with %d partitions, more than the %d a topic can "
            "have: it is served with %d (delete it and create it again to fix it)",
            name,
            count,
            MAX_PARTITIONS,
            MAX_PARTITIONS,
        )
        return MAX_PARTITIONS
    return count


def _dump(value: dict[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True).encode()


class PulsarResources:
    """Cluster metadata: the tenants, namespaces and partitioned topics that exist."""

    def __init__(self, store: MetadataStore, cluster_name: str) -> None:
        self._store = store
        self._lock = threading.Lock()
        self.cluster_name = cluster_name
        self._tenants: dict[str, dict[str, Any]] = {}
        self._namespaces: dict[str, dict[str, Any]] = {}
        self._partitioned: dict[str, int] = {}
        self._topic_policies: dict[str, dict[str, Any]] = {}
        self._clusters: dict[str, dict[str, Any]] = {}
        self._first_start: set[str] = set()
        # typed views of the stored policies, each with the stored dict it was made from
        self._views: dict[str, tuple[dict[str, Any], Policies]] = {}
        self._load()

    # --- loading ------------------------------------------------------------------------------

    def _load(self) -> None:
        store = self._store
        raw_defaults = store.get(keys.FIRST_START)
        self._first_start = set(json.loads(raw_defaults)) if raw_defaults else set()
        for root, depth in keys.DEPTHS.items():
            for parts in keys.walk(store, root, depth):
                self._enter(root, parts, store.get("/".join((root, *parts))))

    def refresh(self, path: str) -> str | TopicName | None:
        """Read ``path`` again from the store into the copy (another broker changed it);
        answers the namespace (``tenant/ns``) or topic whose policies it holds, if any. Runs on
        the event loop: the store answers from memory."""
        if path == keys.FIRST_START:
            raw = self._store.get(path)
            self._first_start = set(json.loads(raw)) if raw else set()
            return None
        found = keys.below(path)
        return None if found is None else self._enter(*found, self._store.get(path))

    def _enter(self, root: str, parts: list[str], raw: bytes | None) -> str | TopicName | None:
        """Put the stored value of the key ``root/parts`` into the copy (None: remove it)."""
        value = json.loads(raw) if raw is not None else None
        if root in (keys.PARTITIONED, keys.TOPIC_POLICIES):
            tenant, ns, domain, local = parts
            name = f"{domain}://{tenant}/{ns}/{local}"
            if root == keys.TOPIC_POLICIES:
                keys.enter(self._topic_policies, name, value)
                return TopicName.parse(name)
            count = None if raw is None else _stored_count(name, raw)
            keys.enter(self._partitioned, name, count)
            return None
        if root == keys.POLICIES:
            keys.enter(self._namespaces, "/".join(parts), value)
            return "/".join(parts)
        keys.enter(self._clusters if root == keys.CLUSTERS else self._tenants, parts[0], value)
        return None

    def ensure_defaults(
        self,
        urls: BrokerUrls,
        admin_roles: list[str] | None = None,
        *,
        default_namespace: bool = True,
    ) -> None:
        """On first start, as Pulsar's standalone does: create the cluster, tenant ``public``
        (administered by ``admin_roles``, the super users) and, when ``default_namespace``,
        namespace ``public/default``. The cluster's URLs are kept those of this broker (none
        for a port that is off) unless they were set through the admin API."""
        key = f"{keys.CLUSTERS}/{self.cluster_name}"
        every = {
            "serviceUrl": urls.web_service_url,
            "serviceUrlTls": urls.web_service_url_tls,
            "brokerServiceUrl": urls.service_url,
            "brokerServiceUrlTls": urls.service_url_tls,
        }
        cluster = {key: url for key, url in every.items() if url}  # as Pulsar, none for "off"
        with self._lock:
            stored = self._clusters.get(self.cluster_name)
            if (stored is None or _SET_BY_ADMIN not in stored) and stored != cluster:
                self._store.put(key, _dump(cluster))
                self._clusters[self.cluster_name] = cluster
        if "public" not in self._tenants:  # another broker sharing them may create them too
            info = {"adminRoles": sorted(admin_roles or []), "allowedClusters": [self.cluster_name]}
            with contextlib.suppress(ConflictError):
                self.create_tenant("public", info)
                self._mark_first_start("tenant:public", True)
        if default_namespace and "public/default" not in self._namespaces:
            with contextlib.suppress(ConflictError):
                self.create_namespace("public/default")
                self._mark_first_start("namespace:public/default", True)

    def _mark_first_start(self, name: str, created: bool) -> bool:
        """Record that the broker created ``name`` itself (or, ``created`` False, that it was
        changed since); answers whether it was so recorded."""
        was = name in self._first_start
        if created != was:
            self._first_start.symmetric_difference_update({name})
            self._store.put(keys.FIRST_START, json.dumps(sorted(self._first_start)).encode())
        return was

    # --- reads (in memory, safe on the event loop) ---------------------------------------------

    def tenants(self) -> list[str]:
        """The names of all tenants, sorted."""
        return sorted(self._tenants)

    def tenant_exists(self, tenant: str) -> bool:
        """Whether the tenant exists."""
        return tenant in self._tenants

    def tenant_info(self, tenant: str) -> dict[str, Any]:
        """A copy of the tenant's admin roles and allowed clusters."""
        try:
            return dict(self._tenants[tenant])
        except KeyError:
            raise NotFoundError(f"Tenant {tenant} does not exist") from None

    def clusters(self) -> list[str]:
        """The names of all clusters, sorted."""
        return sorted(self._clusters)

    def cluster_exists(self, cluster: str) -> bool:
        """Whether the cluster exists."""
        return cluster in self._clusters

    def cluster_data(self, cluster: str | None = None) -> dict[str, Any]:
        """A cluster's ClusterData (``serviceUrl``, ``brokerServiceUrl``, ...; this broker's
        cluster by default)."""
        name = cluster or self.cluster_name
        try:
            data = self._clusters[name]
        except KeyError:
            raise NotFoundError(f"Cluster {name} does not exist") from None
        return {key: value for key, value in data.items() if key != _SET_BY_ADMIN}

    def namespaces(self, tenant: str) -> list[str]:
        """The tenant's namespaces (``tenant/namespace``), sorted."""
        return sorted(ns for ns in list(self._namespaces) if ns.split("/", 1)[0] == tenant)

    def namespace_exists(self, namespace: str) -> bool:
        """Whether the namespace exists."""
        return namespace in self._namespaces

    def namespace_policies(self, namespace: str) -> dict[str, Any]:
        """A copy of the namespace's policies."""
        try:
            return dict(self._namespaces[namespace])
        except KeyError:
            raise NotFoundError(f"Namespace {namespace} does not exist") from None

    def policy(self, namespace: str, key: str) -> Any:
        """One policy of a namespace, as stored (None when unset or the namespace is unknown)."""
        policies = self._namespaces.get(namespace)
        return None if policies is None else policies.get(key)

    def _view(self, name: str, stored: dict[str, Any] | None) -> Policies:
        if stored is None:
            if name in self._views:  # deleted since: forget its view
                self._views.pop(name, None)
            return NO_POLICIES
        cached = self._views.get(name)
        if cached is not None and cached[0] is stored:
            return cached[1]
        view = Policies.from_stored(stored, name)  # once per stored version
        self._views[name] = (stored, view)
        return view

    def namespace_view(self, namespace: str) -> Policies:
        """The namespace's policies, typed (none set when the namespace is unknown)."""
        return self._view(namespace, self._namespaces.get(namespace))

    def topic_view(self, topic: TopicName) -> Policies:
        """The topic-level policies of ``topic`` (those of its partitioned topic for a
        partition), typed."""
        name = str(topic.partitioned_topic_name)
        return self._view(name, self._topic_policies.get(name))

    def partitions(self, topic: TopicName) -> int:
        """Number of partitions of ``topic``, or 0 when it is not a partitioned topic."""
        return self._partitioned.get(str(topic), 0)

    def topic_policies(self, topic: TopicName) -> dict[str, Any]:
        """The topic-level policies of ``topic`` (those of its partitioned topic for a
        partition); empty when none are set."""
        return dict(self._topic_policies.get(str(topic.partitioned_topic_name), {}))

    def topic_policy(self, topic: TopicName, key: str) -> Any:
        """One topic-level policy of ``topic``, as stored (None when unset)."""
        policies = self._topic_policies.get(str(topic.partitioned_topic_name))
        return None if policies is None else policies.get(key)

    def partitioned_topics(self, namespace: str) -> list[str]:
        """The namespace's partitioned topics, sorted."""
        return sorted(
            name
            for name in list(self._partitioned)
            if TopicName.parse(name).namespace_name == namespace
        )

    # --- writes (blocking: call off the event loop) -------------------------------------------

    def create_tenant(self, tenant: str, info: dict[str, Any] | None = None) -> None:
        """Create a tenant (ConflictError if it exists)."""
        with self._lock:
            if tenant in self._tenants and not self._mark_first_start(f"tenant:{tenant}", False):
                raise ConflictError(f"Tenant {tenant} already exists")
            data = info or {"adminRoles": [], "allowedClusters": [self.cluster_name]}
            self._create(
                f"{keys.TENANTS}/{tenant}", data, tenant in self._tenants, f"Tenant {tenant}"
            )
            self._tenants[tenant] = data

    def _create(self, key: str, data: dict[str, Any], replace: bool, what: str) -> None:
        """Store a new resource: only where nothing is stored yet (ConflictError naming
        ``what``, when another broker sharing the store created it meanwhile), unless
        ``replace``."""
        try:
            self._store.put(key, _dump(data), None if replace else ABSENT)
        except BadVersionError:
            raise ConflictError(f"{what} already exists") from None

    def create_cluster(self, cluster: str, data: dict[str, Any]) -> None:
        """Register a cluster (ConflictError if it exists)."""
        with self._lock:
            stored = self._clusters.get(cluster)
            if stored is not None and (cluster != self.cluster_name or _SET_BY_ADMIN in stored):
                raise ConflictError(f"Cluster {cluster} already exists")
            self._put_cluster(cluster, data)

    def update_cluster(self, cluster: str, data: dict[str, Any]) -> None:
        """Replace a cluster's ClusterData (this broker then stops keeping its URLs)."""
        with self._lock:
            if cluster not in self._clusters:
                raise NotFoundError(f"Cluster {cluster} does not exist")
            self._put_cluster(cluster, data)

    def _put_cluster(self, cluster: str, data: dict[str, Any]) -> None:
        stored = {**data, _SET_BY_ADMIN: True}
        self._store.put(f"{keys.CLUSTERS}/{cluster}", _dump(stored))
        self._clusters[cluster] = stored

    def delete_cluster(self, cluster: str) -> None:
        """Forget a cluster that no tenant allows."""
        with self._lock:
            if cluster not in self._clusters:
                raise NotFoundError(f"Cluster {cluster} does not exist")
            users = sorted(
                t
                for t, info in list(self._tenants.items())
                if cluster in info.get("allowedClusters", [])
            )
            if users:
                raise BrokerServiceError(f"Cluster {cluster} is still allowed to tenants {users}")
            self._store.delete(f"{keys.CLUSTERS}/{cluster}")
            self._clusters.pop(cluster, None)  # the watch may have been first

    def update_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        """Replace a tenant's admin roles and allowed clusters."""
        with self._lock:
            if tenant not in self._tenants:
                raise NotFoundError(f"Tenant {tenant} does not exist")
            self._mark_first_start(f"tenant:{tenant}", False)
            self._store.put(f"{keys.TENANTS}/{tenant}", _dump(info))
            self._tenants[tenant] = info

    def delete_tenant(self, tenant: str) -> None:
        """Delete a tenant that has no namespaces left."""
        with self._lock:
            if tenant not in self._tenants:
                raise NotFoundError(f"Tenant {tenant} does not exist")
            if self.namespaces(tenant):
                raise ConflictError(f"Tenant {tenant} still has namespaces")
            self._mark_first_start(f"tenant:{tenant}", False)
            self._store.delete(f"{keys.TENANTS}/{tenant}")
            self._tenants.pop(tenant, None)  # the watch may have been first

    def create_namespace(self, namespace: str, policies: dict[str, Any] | None = None) -> None:
        """Create a namespace of an existing tenant (ConflictError if it exists)."""
        tenant, _, ns = namespace.partition("/")
        if not tenant or not ns or "/" in ns:
            raise MetadataError(f"Invalid namespace name {namespace!r}: expected tenant/namespace")
        with self._lock:
            if tenant not in self._tenants:
                raise NotFoundError(f"Tenant {tenant} does not exist")
            placeholder = self._mark_first_start(f"namespace:{namespace}", False)
            if namespace in self._namespaces and not placeholder:
                raise ConflictError(f"Namespace {namespace} already exists")
            data = policies or {}
            replace = namespace in self._namespaces
            self._create(f"{keys.POLICIES}/{namespace}", data, replace, f"Namespace {namespace}")
            self._namespaces[namespace] = data

    def update_namespace_policies(
        self, namespace: str, edit: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]:
        """Read, ``edit`` (in place) and store the namespace's policies as one step, so that
        concurrent updates, through this broker or another, do not lose each other's changes;
        answers the stored policies."""

        def apply(policies: dict[str, Any] | None) -> dict[str, Any]:
            if policies is None or namespace not in self._namespaces:
                raise NotFoundError(f"Namespace {namespace} does not exist")
            edit(policies)
            return policies

        with self._lock:
            self._mark_first_start(f"namespace:{namespace}", False)
            policies = self._compare_and_set(f"{keys.POLICIES}/{namespace}", apply)
            self._namespaces[namespace] = policies
            return dict(policies)

    def _compare_and_set(
        self, key: str, edit: Callable[[dict[str, Any] | None], dict[str, Any]]
    ) -> dict[str, Any]:
        """Store ``edit(stored value)`` (an empty result deletes the key) at the version read;
        read and edited again when another broker wrote the key meanwhile."""
        for _ in range(_UPDATE_ATTEMPTS):
            found = self._store.get_versioned(key)
            value = edit(None if found is None else json.loads(found.value))
            expected = ABSENT if found is None else found.version
            try:
                if value:
                    self._store.put(key, _dump(value), expected)
                elif found is not None:
                    self._store.delete(key, expected)
            except BadVersionError:
                continue
            return value
        raise MetadataError(f"{key} keeps changing; try again")

    def delete_namespace(self, namespace: str) -> None:
        """Delete a namespace and its policies."""
        with self._lock:
            if namespace not in self._namespaces:
                raise NotFoundError(f"Namespace {namespace} does not exist")
            self._mark_first_start(f"namespace:{namespace}", False)
            self._store.delete(f"{keys.POLICIES}/{namespace}")
            self._namespaces.pop(namespace, None)  # the watch may have been first

    def _partitioned_key(self, topic: TopicName) -> str:
        return "/".join(
            (keys.PARTITIONED, topic.tenant, topic.namespace, topic.domain.value, topic.local_name)
        )

    def create_partitioned_topic(self, topic: TopicName, partitions: int) -> None:
        """Record a partitioned topic and its partition count."""
        if partitions < 1:
            raise MetadataError("The number of partitions must be at least 1")
        if topic.is_partition:
            raise MetadataError(f"{topic} is a partition name; a partitioned topic cannot be one")
        with self._lock:
            if topic.namespace_name not in self._namespaces:
                raise NotFoundError(f"Namespace {topic.namespace_name} does not exist")
            if str(topic) in self._partitioned:
                raise ConflictError(f"Partitioned topic {topic} already exists")
            data = {"partitions": partitions}
            self._create(self._partitioned_key(topic), data, False, f"Partitioned topic {topic}")
            self._partitioned[str(topic)] = partitions

    def update_partitioned_topic(self, topic: TopicName, partitions: int) -> None:
        """Raise a partitioned topic's partition count: it never shrinks, and asking for the
        current count changes nothing."""
        with self._lock:
            current = self._partitioned.get(str(topic))
            if current is None:
                raise NotFoundError(f"Partitioned topic {topic} does not exist")
            if partitions < current:
                raise UnprocessableError(
                    f"The number of partitions can only grow (now {current}, asked {partitions})"
                )
            if partitions == current:
                return
            self._store.put(self._partitioned_key(topic), _dump({"partitions": partitions}))
            self._partitioned[str(topic)] = partitions

    def _topic_policies_key(self, topic: TopicName) -> str:
        base = topic.partitioned_topic_name
        return "/".join(
            (keys.TOPIC_POLICIES, base.tenant, base.namespace, base.domain.value, base.local_name)
        )

    def set_topic_policies(self, topic: TopicName, policies: dict[str, Any]) -> None:
        """Store the topic-level policies of ``topic`` (an empty dict removes them)."""

        def replace(stored: dict[str, Any]) -> None:
            stored.clear()
            stored.update(policies)

        self.update_topic_policies(topic, replace)

    def update_topic_policies(
        self, topic: TopicName, edit: Callable[[dict[str, Any]], object]
    ) -> dict[str, Any]:
        """Read, ``edit`` (in place; empty: none) and store the topic-level policies of
        ``topic`` as one step, as :meth:`update_namespace_policies`; answers them."""
        with self._lock:
            if topic.namespace_name not in self._namespaces:
                raise NotFoundError(f"Namespace {topic.namespace_name} does not exist")

            def apply(stored: dict[str, Any] | None) -> dict[str, Any]:
                policies = stored or {}
                edit(policies)
                return policies

            policies = self._compare_and_set(self._topic_policies_key(topic), apply)
            keys.enter(self._topic_policies, str(topic.partitioned_topic_name), policies or None)
            return dict(policies)

    def delete_partitioned_topic(self, topic: TopicName) -> None:
        """Forget a partitioned topic's metadata."""
        with self._lock:
            if str(topic) not in self._partitioned:
                raise NotFoundError(f"Partitioned topic {topic} does not exist")
            self._store.delete(self._partitioned_key(topic))
            self._partitioned.pop(str(topic), None)  # the watch may have been first
