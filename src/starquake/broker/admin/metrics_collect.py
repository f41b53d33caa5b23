"""The broker's live state as Prometheus metric families, under Pulsar's names, read at scrape
time (the storage histograms and process metrics are in :mod:`starquake.broker.admin.metrics`).

- topic and subscription series labelled ``cluster``, ``namespace``, ``topic`` (and
  ``subscription``) while ``exposeTopicLevelMetricsInPrometheus`` is on (Pulsar's default);
  off, the same topic figures summed per namespace (labels ``cluster`` and ``namespace``) and
  no subscription series, as Pulsar does;
- ``pulsar_topics_count`` per namespace, always;
- each persistent topic's (or namespace's) write latency and entry size in Pulsar's buckets
  (``pulsar_storage_write_latency_le_*``, ``pulsar_entry_size_le_*``, with ``_count`` and
  ``_sum``), over the last completed stats interval as Pulsar reports them;
- broker totals (``pulsar_broker_*``), the broker's publish latency summary in milliseconds
  (``pulsar_broker_publish_latency``), the binary protocol's connections and the failed group
  commits;
- the entry cache's size (``pulsar_ml_cache_used_size``) and entries (``pulsar_ml_cache_entries``).

A scrape runs on the event loop and reads in-memory state only, in time proportional to the
number of topics, subscriptions and consumers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from starquake.broker.observations import (
    ENTRY_SIZE_SUFFIXES,
    PUBLISH_QUANTILES,
    WRITE_LATENCY_SUFFIXES,
    Buckets,
)
from starquake.broker.topic import PersistentTopic

if TYPE_CHECKING:
    from starquake.broker.nonpersistent import NonPersistentTopic
    from starquake.broker.service import BrokerService

log = logging.getLogger("starquake.broker.admin.metrics")

_NS_LABELS = ["cluster", "namespace"]
_TOPIC_LABELS = [*_NS_LABELS, "topic"]
_SUBSCRIPTION_LABELS = [*_TOPIC_LABELS, "subscription"]

# (metric, help, field of TopicFigures): gauges of a topic, or of a namespace summed over its topics
_FIGURE_GAUGES = (
    ("pulsar_rate_in", "Messages published per second.", "rate_in"),
    ("pulsar_rate_out", "Messages dispatched per second.", "rate_out"),
    ("pulsar_throughput_in", "Bytes published per second.", "throughput_in"),
    ("pulsar_throughput_out", "Bytes dispatched per second.", "throughput_out"),
    ("pulsar_storage_size", "Bytes the ledgers take in storage.", "storage_size"),
    (
        "pulsar_storage_backlog_size",
        "Bytes of the entries some subscription has not acknowledged.",
        "backlog_size",
    ),
    ("pulsar_msg_backlog", "Entries not acknowledged, summed over subscriptions.", "backlog"),
    ("pulsar_producers_count", "Producers connected.", "producers"),
    ("pulsar_consumers_count", "Consumers connected.", "consumers"),
    ("pulsar_subscriptions_count", "Subscriptions.", "subscriptions"),
)
_FIGURE_COUNTERS = (
    ("pulsar_in_messages", "Messages published.", "in_messages"),
    ("pulsar_in_bytes", "Bytes published.", "in_bytes"),
    ("pulsar_out_messages", "Messages dispatched.", "out_messages"),
    ("pulsar_out_bytes", "Bytes dispatched.", "out_bytes"),
)
_SUBSCRIPTION_GAUGES = (
    ("pulsar_subscription_back_log", "Entries not acknowledged.", "msgBacklog"),
    (
        "pulsar_subscription_unacked_messages",
        "Messages dispatched to the subscription's consumers and not acknowledged yet.",
        "unackedMessages",
    ),
    ("pulsar_subscription_delayed", "Messages held back for delayed delivery.", "msgDelayed"),
    ("pulsar_subscription_msg_rate_out", "Messages dispatched per second.", "msgRateOut"),
    ("pulsar_subscription_msg_throughput_out", "Bytes dispatched per second.", "msgThroughputOut"),
    (
        "pulsar_subscription_msg_rate_redeliver",
        "Messages its consumers asked to have redelivered, per second.",
        "msgRateRedeliver",
    ),
    (
        "pulsar_subscription_back_log_no_delayed",
        "Entries not acknowledged, without those held back for delayed delivery.",
        "msgBacklogNoDelayed",
    ),
    (
        "pulsar_subscription_blocked_on_unacked_messages",
        "1 while dispatch waits for acknowledgments (maxUnackedMessagesPerSubscription), else 0.",
        "blockedSubscriptionOnUnackedMsgs",
    ),
    ("pulsar_subscription_msg_ack_rate", "Messages acknowledged per second.", "messageAckRate"),
    (
        "pulsar_subscription_msg_rate_expired",
        "Messages expired by the message TTL per second.",
        "msgRateExpired",
    ),
    (
        "pulsar_subscription_total_msg_expired",
        "Messages expired by the message TTL.",
        "totalMsgExpired",
    ),
    *(
        (f"pulsar_subscription_last_{name}_timestamp", f"When {what} (epoch ms; 0: never).", key)
        for name, what, key in (
            ("expire", "messages last expired", "lastExpireTimestamp"),
            ("acked", "a consumer last acknowledged", "lastAckedTimestamp"),
            ("consumed_flow", "a consumer last sent FLOW", "lastConsumedFlowTimestamp"),
            ("consumed", "messages were last dispatched", "lastConsumedTimestamp"),
            (
                "mark_delete_advanced",
                "the mark-delete position last moved",
                "lastMarkDeleteAdvancedTimestamp",
            ),
        )
    ),
)
# (metric prefix, help, bucket name suffixes, field of TopicFigures)
_BUCKETED = (
    (
        "pulsar_storage_write_latency",
        "Entries by the milliseconds from reading their SEND to their being durable, over the "
        "last stats interval.",
        WRITE_LATENCY_SUFFIXES,
        "write_latency",
    ),
    (
        "pulsar_entry_size",
        "Entries stored by size in bytes, over the last stats interval.",
        ENTRY_SIZE_SUFFIXES,
        "entry_sizes",
    ),
)
# (metric, help, field of TopicFigures): the broker's totals
_BROKER_GAUGES = (
    ("pulsar_broker_topics_count", "Topics loaded by this broker.", "topics"),
    ("pulsar_broker_subscriptions_count", "Subscriptions of the loaded topics.", "subscriptions"),
    ("pulsar_broker_producers_count", "Producers connected to this broker.", "producers"),
    ("pulsar_broker_consumers_count", "Consumers connected to this broker.", "consumers"),
    ("pulsar_broker_rate_in", "Messages published to this broker per second.", "rate_in"),
    ("pulsar_broker_rate_out", "Messages dispatched by this broker per second.", "rate_out"),
    ("pulsar_broker_throughput_in", "Bytes published per second.", "throughput_in"),
    ("pulsar_broker_throughput_out", "Bytes dispatched per second.", "throughput_out"),
    ("pulsar_broker_storage_size", "Bytes the loaded topics take in storage.", "storage_size"),
    ("pulsar_broker_msg_backlog", "Entries not acknowledged over all subscriptions.", "backlog"),
)
_CONNECTION_GAUGES = (
    ("pulsar_active_connections", "Connections open now.", None),
    ("pulsar_connection_created_total_count", "Connections accepted.", "created"),
    ("pulsar_connection_create_success_count", "Connections whose CONNECT passed.", "succeeded"),
    ("pulsar_connection_create_fail_count", "Connections whose CONNECT was refused.", "failed"),
    ("pulsar_connection_closed_total_count", "Connections closed.", "closed"),
)


_CACHE_GAUGES = (
    ("pulsar_ml_cache_used_size", "Bytes of the entry cache in use (payloads and bookkeeping)."),
    ("pulsar_ml_cache_entries", "Entries in the entry cache."),
)


def _number(value: object) -> float:
    """A stats value as a float (a flag as 1 or 0; 0 for a missing or non-numeric one)."""
    if isinstance(value, (int, float)):  # bool included
        return float(value)
    return 0.0


@dataclass
class TopicFigures:
    """What the metrics say of one topic, or summed over several."""

    topics: int = 0
    rate_in: float = 0.0
    rate_out: float = 0.0
    throughput_in: float = 0.0
    throughput_out: float = 0.0
    storage_size: float = 0.0
    backlog_size: float = 0.0
    backlog: float = 0.0
    producers: int = 0
    consumers: int = 0
    subscriptions: int = 0
    in_messages: float = 0.0
    in_bytes: float = 0.0
    out_messages: float = 0.0
    out_bytes: float = 0.0
    write_latency: list[float] = field(default_factory=lambda: [0.0] * 12)
    entry_sizes: list[float] = field(default_factory=lambda: [0.0] * 11)

    @classmethod
    def of(
        cls, topic: PersistentTopic | NonPersistentTopic, stats: Mapping[str, Any]
    ) -> TopicFigures:
        """The figures of ``topic``, whose stats are ``stats``."""
        subscriptions: Mapping[str, Mapping[str, Any]] = stats.get("subscriptions") or {}
        figures = cls(
            topics=1,
            rate_in=_number(stats.get("msgRateIn")),
            rate_out=_number(stats.get("msgRateOut")),
            throughput_in=_number(stats.get("msgThroughputIn")),
            throughput_out=_number(stats.get("msgThroughputOut")),
            storage_size=_number(stats.get("storageSize")),
            backlog_size=_number(stats.get("backlogSize")),
            backlog=sum(_number(s.get("msgBacklog")) for s in subscriptions.values()),
            producers=len(stats.get("publishers") or ()),
            consumers=sum(len(s.get("consumers") or ()) for s in subscriptions.values()),
            subscriptions=len(subscriptions),
            in_messages=_number(stats.get("msgInCounter")),
            in_bytes=_number(stats.get("bytesInCounter")),
            out_messages=_number(stats.get("msgOutCounter")),
            out_bytes=_number(stats.get("bytesOutCounter")),
        )
        if isinstance(topic, PersistentTopic):
            figures.write_latency = _last_interval(topic.write_latency)
            figures.entry_sizes = _last_interval(topic.entry_sizes)
        return figures

    def add(self, other: TopicFigures) -> None:
        """Sum ``other`` into these figures."""
        for name, value in vars(other).items():
            if isinstance(value, list):
                mine = getattr(self, name)
                setattr(self, name, [a + b for a, b in zip(mine, value, strict=True)])
            else:
                setattr(self, name, getattr(self, name) + value)


def _last_interval(buckets: Buckets) -> list[float]:
    """The buckets' counts over the last interval, then their number and sum."""
    return [*map(float, buckets.last), float(buckets.last_count), buckets.last_sum]


class _Families:
    """The metric families of one collection, by name."""

    def __init__(self, per_topic: bool) -> None:
        self.gauges: dict[str, GaugeMetricFamily] = {}
        self.counters: dict[str, CounterMetricFamily] = {}
        self.other: list[Metric] = []
        labels = _TOPIC_LABELS if per_topic else _NS_LABELS
        self.gauge("pulsar_topics_count", "Topics of the namespace loaded here.", _NS_LABELS)
        for name, doc, _ in _FIGURE_GAUGES:
            self.gauge(name, doc, labels)
        for name, doc, _ in _FIGURE_COUNTERS:
            self.counters[name] = CounterMetricFamily(name, doc, labels=labels)
        for prefix, doc, suffixes, _ in _BUCKETED:
            for suffix in (*(f"le_{s}" for s in suffixes), "count", "sum"):
                self.gauge(f"{prefix}_{suffix}", doc, labels)
        if per_topic:
            for name, doc, _ in _SUBSCRIPTION_GAUGES:
                self.gauge(name, doc, _SUBSCRIPTION_LABELS)
            self.gauge(
                "pulsar_subscription_consumers_count",
                "Consumers connected to the subscription.",
                _SUBSCRIPTION_LABELS,
            )
        for name, doc, _ in _BROKER_GAUGES:
            self.gauge(name, doc, ["cluster"])
        for name, doc, _ in _CONNECTION_GAUGES:
            self.gauge(name, doc, ["cluster", "broker"])
        self.counters["starquake_storage_group_commit_failures"] = CounterMetricFamily(
            "starquake_storage_group_commit_failures",
            "Group commits whose write or fsync failed (their topics are fenced).",
            labels=[],
        )

    def gauge(self, name: str, doc: str, labels: list[str]) -> None:
        self.gauges[name] = GaugeMetricFamily(name, doc, labels=labels)

    def add_figures(self, labels: list[str], figures: TopicFigures) -> None:
        """One topic's (or namespace's) samples."""
        for name, _, attr in _FIGURE_GAUGES:
            self.gauges[name].add_metric(labels, float(getattr(figures, attr)))
        for name, _, attr in _FIGURE_COUNTERS:
            self.counters[name].add_metric(labels, float(getattr(figures, attr)))
        for prefix, _, suffixes, attr in _BUCKETED:
            values: list[float] = getattr(figures, attr)
            names = [*(f"le_{s}" for s in suffixes), "count", "sum"]
            for suffix, value in zip(names, values, strict=True):
                self.gauges[f"{prefix}_{suffix}"].add_metric(labels, value)

    def add_subscriptions(self, labels: list[str], stats: Mapping[str, Any]) -> None:
        subscriptions: Mapping[str, Mapping[str, Any]] = stats.get("subscriptions") or {}
        for sub_name, sub in subscriptions.items():
            sub_labels = [*labels, sub_name]
            for name, _, key in _SUBSCRIPTION_GAUGES:
                self.gauges[name].add_metric(sub_labels, _number(sub.get(key)))
            consumers = len(sub.get("consumers") or ())
            self.gauges["pulsar_subscription_consumers_count"].add_metric(sub_labels, consumers)

    def all(self) -> list[Metric]:
        return [*self.gauges.values(), *self.counters.values(), *self.other]


class BrokerCollector:
    """Reads the broker's live state when the registry is collected."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service

    def describe(self) -> list[Metric]:
        """The metric families (without samples), for the registry's name clash check."""
        return self._families().all()

    def _families(self) -> _Families:
        families = _Families(self._service.config.exposeTopicLevelMetricsInPrometheus)
        families.other.append(self._publish_latency())
        for name, doc in _CACHE_GAUGES:
            families.gauge(name, doc, ["cluster"])
        return families

    def collect(self) -> list[Metric]:
        """The broker's metric families at this instant, for a /metrics scrape."""
        service = self._service
        per_topic = service.config.exposeTopicLevelMetricsInPrometheus
        families = self._families()
        cluster = service.config.clusterName
        namespaces: dict[str, TopicFigures] = {}
        broker = TopicFigures()
        for topic in self._topics():
            try:
                stats = topic.stats()
            except Exception:
                log.exception("cannot read the stats of %s for metrics", topic.full_name)
                continue
            figures = TopicFigures.of(topic, stats)
            namespace = topic.name.namespace_name
            summed = namespaces.setdefault(namespace, TopicFigures())
            if per_topic:
                summed.topics += 1  # the namespace's series: only its topic count
            else:
                summed.add(figures)
            broker.add(figures)
            if per_topic:
                labels = [cluster, namespace, topic.full_name]
                families.add_figures(labels, figures)
                families.add_subscriptions(labels, stats)
        for namespace, summed in sorted(namespaces.items()):
            families.gauges["pulsar_topics_count"].add_metric([cluster, namespace], summed.topics)
            if not per_topic:
                families.add_figures([cluster, namespace], summed)
        for name, _, attr in _BROKER_GAUGES:
            families.gauges[name].add_metric([cluster], float(getattr(broker, attr)))
        self._add_connections(families, cluster)
        cache = service.storage.cache
        families.gauges["pulsar_ml_cache_used_size"].add_metric([cluster], float(cache.size))
        families.gauges["pulsar_ml_cache_entries"].add_metric([cluster], float(cache.entries))
        failures = families.counters["starquake_storage_group_commit_failures"]
        failures.add_metric([], service.committer.failures)
        return families.all()

    def _add_connections(self, families: _Families, cluster: str) -> None:
        service = self._service
        labels = [cluster, service.owner_broker]
        counts = service.connection_counts
        for name, _, attr in _CONNECTION_GAUGES:
            value = len(service.connections) if attr is None else getattr(counts, attr)
            families.gauges[name].add_metric(labels, value)

    def _publish_latency(self) -> Metric:
        """Pulsar's summary: quantiles over the last stats interval, count and sum since start."""
        service = self._service
        latency = service.publish_latency
        labels = {"cluster": service.config.clusterName}
        name = "pulsar_broker_publish_latency"
        doc = "Milliseconds from reading a SEND to its entry being durable."
        metric = Metric(name, doc, "summary")
        for q in PUBLISH_QUANTILES:
            metric.add_sample(name, {**labels, "quantile": str(q)}, latency.quantile(q))
        metric.add_sample(f"{name}_count", labels, float(latency.count))
        metric.add_sample(f"{name}_sum", labels, latency.sum)
        return metric

    def _topics(self) -> Iterable[PersistentTopic | NonPersistentTopic]:
        yield from list(self._service.topics.values())
        yield from list(self._service.nonpersistent_topics.values())
