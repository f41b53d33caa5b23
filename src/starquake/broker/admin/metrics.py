"""``GET /metrics`` (and ``/metrics/``): the broker's metrics in Prometheus' text format.

Each broker has a registry of its own (several brokers can run in one process) holding:

- topic and subscription metrics under Pulsar's names, labelled ``cluster``, ``namespace`` and
  ``topic`` (and ``subscription``), read from every loaded topic's ``stats()`` at scrape time;
- ``pulsar_topics_count`` per namespace (labels ``cluster`` and ``namespace``);
- storage metrics: the latency of each ledger file fsync and the size of each group commit
  (entries and bytes), observed once per commit, and the number of failed commits;
- the process (CPU, memory, open files), the Python platform and its garbage collector.

A scrape runs on the event loop and reads in-memory state only, in time proportional to the
number of topics, subscriptions and consumers.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from starquake.broker.admin.replies import Reply
from starquake.broker.web import json_reply

if TYPE_CHECKING:
    from starquake.broker.nonpersistent import NonPersistentTopic
    from starquake.broker.service import BrokerService
    from starquake.broker.topic import PersistentTopic
    from starquake.broker.web import WebServer
    from starquake.storage import PendingCommit

log = logging.getLogger(__name__)

__all__ = ["BrokerCollector", "BrokerMetrics", "install"]

_TOPIC_LABELS = ["cluster", "namespace", "topic"]
_SUBSCRIPTION_LABELS = [*_TOPIC_LABELS, "subscription"]

# (metric, help, field of the topic's stats) for the values taken as they are
_TOPIC_GAUGES = (
    ("pulsar_rate_in", "Messages published to the topic per second.", "msgRateIn"),
    ("pulsar_rate_out", "Messages dispatched from the topic per second.", "msgRateOut"),
    ("pulsar_throughput_in", "Bytes published to the topic per second.", "msgThroughputIn"),
    ("pulsar_throughput_out", "Bytes dispatched from the topic per second.", "msgThroughputOut"),
    ("pulsar_storage_size", "Bytes the topic's ledgers take in storage.", "storageSize"),
    (
        "pulsar_storage_backlog_size",
        "Bytes of the topic's entries some subscription has not acknowledged.",
        "backlogSize",
    ),
)
_TOPIC_COUNTERS = (
    ("pulsar_in_messages", "Messages published to the topic.", "msgInCounter"),
    ("pulsar_in_bytes", "Bytes published to the topic.", "bytesInCounter"),
    ("pulsar_out_messages", "Messages dispatched from the topic.", "msgOutCounter"),
    ("pulsar_out_bytes", "Bytes dispatched from the topic.", "bytesOutCounter"),
)
_SUBSCRIPTION_GAUGES = (
    (
        "pulsar_subscription_back_log",
        "Entries the subscription has not acknowledged.",
        "msgBacklog",
    ),
    (
        "pulsar_subscription_unacked_messages",
        "Messages dispatched to the subscription's consumers and not acknowledged yet.",
        "unackedMessages",
    ),
    ("pulsar_subscription_delayed", "Messages held back for delayed delivery.", "msgDelayed"),
    (
        "pulsar_subscription_msg_rate_out",
        "Messages dispatched to the subscription per second.",
        "msgRateOut",
    ),
    (
        "pulsar_subscription_msg_throughput_out",
        "Bytes dispatched to the subscription per second.",
        "msgThroughputOut",
    ),
)
# (metric, help) of the values counted from the stats' lists
_TOPIC_COUNTS = (
    ("pulsar_msg_backlog", "Entries not acknowledged, summed over the topic's subscriptions."),
    ("pulsar_producers_count", "Producers connected to the topic."),
    ("pulsar_consumers_count", "Consumers connected to the topic."),
    ("pulsar_subscriptions_count", "Subscriptions of the topic."),
)

# fsyncs take from tens of microseconds (a cache-backed device) to seconds (a stalled disk)
_FSYNC_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
_ENTRY_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000)
_BYTE_BUCKETS = tuple(float(1024 * 4**i) for i in range(10))  # 1 KiB .. 256 MiB


def _number(value: object) -> float:
    """A stats value as a float (0 for a missing or non-numeric one)."""
    if isinstance(value, (int, float)):
        return float(value)
    return 0.0


class _Families:
    """The metric families of one collection, by name."""

    def __init__(self) -> None:
        self.gauges: dict[str, GaugeMetricFamily] = {}
        self.counters: dict[str, CounterMetricFamily] = {}

    def gauge(self, name: str, doc: str, labels: list[str]) -> None:
        self.gauges[name] = GaugeMetricFamily(name, doc, labels=labels)

    def counter(self, name: str, doc: str, labels: list[str]) -> None:
        self.counters[name] = CounterMetricFamily(name, doc, labels=labels)

    def all(self) -> list[Metric]:
        return [*self.gauges.values(), *self.counters.values()]


class BrokerCollector:
    """Reads the broker's live state when the registry is collected."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service

    def describe(self) -> list[Metric]:
        """The metric families (without samples), for the registry's name clash check."""
        return self._families().all()

    def collect(self) -> list[Metric]:
        """The broker's metric families at this instant, for a /metrics scrape."""
        families = self._families()
        service = self._service
        cluster = service.config.clusterName
        topics_per_namespace: Counter[str] = Counter()
        for topic in self._topics():
            try:
                stats = topic.stats()
            except Exception:
                log.exception("cannot read the stats of %s for metrics", topic.full_name)
                continue
            namespace = topic.name.namespace_name
            topics_per_namespace[namespace] += 1
            self._add_topic(families, [cluster, namespace, topic.full_name], stats)
        topics_count = families.gauges["pulsar_topics_count"]
        for namespace, count in sorted(topics_per_namespace.items()):
            topics_count.add_metric([cluster, namespace], count)
        families.counters["starquake_storage_group_commit_failures"].add_metric(
            [], service.committer.failures
        )
        return families.all()

    def _topics(self) -> Iterable[PersistentTopic | NonPersistentTopic]:
        yield from list(self._service.topics.values())
        yield from list(self._service.nonpersistent_topics.values())

    @staticmethod
    def _families() -> _Families:
        families = _Families()
        families.gauge(
            "pulsar_topics_count",
            "Topics of the namespace loaded by this broker.",
            ["cluster", "namespace"],
        )
        families.counter(
            "starquake_storage_group_commit_failures",
            "Group commits whose write or fsync failed (their topics are fenced).",
            [],
        )
        for name, doc, _ in _TOPIC_GAUGES:
            families.gauge(name, doc, _TOPIC_LABELS)
        for name, doc in _TOPIC_COUNTS:
            families.gauge(name, doc, _TOPIC_LABELS)
        for name, doc, _ in _TOPIC_COUNTERS:
            families.counter(name, doc, _TOPIC_LABELS)
        for name, doc, _ in _SUBSCRIPTION_GAUGES:
            families.gauge(name, doc, _SUBSCRIPTION_LABELS)
        families.gauge(
            "pulsar_subscription_consumers_count",
            "Consumers connected to the subscription.",
            _SUBSCRIPTION_LABELS,
        )
        return families

    @staticmethod
    def _add_topic(families: _Families, labels: list[str], stats: Mapping[str, Any]) -> None:
        gauges = families.gauges
        for name, _, field in _TOPIC_GAUGES:
            gauges[name].add_metric(labels, _number(stats.get(field, 0)))
        for name, _, field in _TOPIC_COUNTERS:
            families.counters[name].add_metric(labels, _number(stats.get(field, 0)))
        subscriptions: Mapping[str, Mapping[str, Any]] = stats.get("subscriptions") or {}
        backlog = 0.0
        consumers = 0
        for sub_name, sub in subscriptions.items():
            sub_labels = [*labels, sub_name]
            for name, _, field in _SUBSCRIPTION_GAUGES:
                gauges[name].add_metric(sub_labels, _number(sub.get(field, 0)))
            sub_consumers = len(sub.get("consumers") or ())
            gauges["pulsar_subscription_consumers_count"].add_metric(sub_labels, sub_consumers)
            backlog += _number(sub.get("msgBacklog", 0))
            consumers += sub_consumers
        gauges["pulsar_msg_backlog"].add_metric(labels, backlog)
        gauges["pulsar_producers_count"].add_metric(labels, len(stats.get("publishers") or ()))
        gauges["pulsar_consumers_count"].add_metric(labels, consumers)
        gauges["pulsar_subscriptions_count"].add_metric(labels, len(subscriptions))


class BrokerMetrics:
    """One broker's registry: live topic state, storage histograms, process metrics."""

    def __init__(self, service: BrokerService) -> None:
        registry = CollectorRegistry()
        self.registry = registry
        registry.register(BrokerCollector(service))
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        self.fsync_latency = Histogram(
            "starquake_storage_fsync_latency_seconds",
            "Time one fsync of a ledger file took in a group commit.",
            buckets=_FSYNC_BUCKETS,
            registry=registry,
        )
        self.commit_entries = Histogram(
            "starquake_storage_group_commit_entries",
            "Entries written by one group commit (all topics together).",
            buckets=_ENTRY_BUCKETS,
            registry=registry,
        )
        self.commit_bytes = Histogram(
            "starquake_storage_group_commit_bytes",
            "Bytes written by one group commit (records with their framing).",
            buckets=_BYTE_BUCKETS,
            registry=registry,
        )
        service.committer.observers.append(self.observe_commit)

    def observe_commit(self, commit: PendingCommit) -> None:
        """Record a commit that succeeded (called on the loop, once per commit)."""
        for seconds in commit.sync_seconds:
            self.fsync_latency.observe(seconds)
        entries = commit.entry_count
        if entries:  # commits that only seal, index or delete files carry no entries
            self.commit_entries.observe(entries)
            self.commit_bytes.observe(commit.bytes_written)

    def render(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)


def install(web: WebServer, service: BrokerService) -> None:
    """Serve ``/metrics`` and ``/metrics/`` on ``web`` from a new registry for ``service``."""
    metrics = BrokerMetrics(service)

    async def scrape(_method: str, _target: str, _body: bytes) -> Reply:
        try:
            body = metrics.render()
        except Exception:
            log.exception("collecting metrics failed")
            return json_reply(500, {"reason": "collecting metrics failed; see the broker log"})
        return 200, CONTENT_TYPE_LATEST, body

    web.route("GET", "/metrics", scrape)
    web.route("GET", "/metrics/", scrape)
