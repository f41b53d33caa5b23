"""``GET /metrics`` (and ``/metrics/``): the broker's metrics in Prometheus' text format.

Each broker has a registry of its own (several brokers can run in one process) holding:

- the broker's live state under Pulsar's names (topics, subscriptions, namespaces, broker
  totals, publish latency, connections), read at scrape time by
  :class:`~starquake.broker.admin.metrics_collect.BrokerCollector`;
- storage metrics: the latency of each ledger file fsync and the size of each group commit
  (entries and bytes), observed once per commit, and the number of failed commits;
- the process (CPU, memory, open files), the Python platform and its garbage collector.

A scrape reads the in-memory state on the event loop; the text is formatted in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import CounterMetricFamily, Metric

from starquake.broker.admin.metrics_collect import BrokerCollector
from starquake.broker.admin.metrics_txn import TransactionCollector
from starquake.broker.admin.replies import Reply
from starquake.broker.admin.routing import Route
from starquake.broker.web import Call, Need, json_reply
from starquake.storage.append_stats import AppendStats

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService
    from starquake.storage import PendingCommit

log = logging.getLogger(__name__)

__all__ = ["ROUTES", "BrokerCollector", "BrokerMetrics", "metrics_of", "scrape"]

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


class BrokerMetrics:
    """One broker's registry: live topic state, storage histograms, process metrics."""

    def __init__(self, service: BrokerService) -> None:
        registry = CollectorRegistry()
        self.registry = registry
        registry.register(BrokerCollector(service))
        registry.register(TransactionCollector(service))
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
        stats = getattr(service.storage, "append_stats", None)
        if isinstance(stats, AppendStats):  # cluster mode: each ledger commits by itself
            self._observe_appends(registry, stats)
        self.owner = weakref.ref(service)

    def _observe_appends(self, registry: CollectorRegistry, stats: AppendStats) -> None:
        """Cluster mode's counterparts of the group commit's histograms: one observation per
        record stored in JetStream (the group commit of one topic)."""
        latency = Histogram(
            "starquake_jetstream_append_latency_seconds",
            "Time from writing a record of a topic's entries to JetStream until the stream "
            "acknowledged it as stored on its quorum of replicas.",
            buckets=_FSYNC_BUCKETS,
            registry=registry,
        )
        entries = Histogram(
            "starquake_jetstream_record_entries",
            "Entries in one record stored in JetStream (one topic's group commit).",
            buckets=_ENTRY_BUCKETS,
            registry=registry,
        )
        size = Histogram(
            "starquake_jetstream_record_bytes",
            "Bytes of one record stored in JetStream (entries with their framing).",
            buckets=_BYTE_BUCKETS,
            registry=registry,
        )

        def observe(seconds: float, count: int, length: int) -> None:
            latency.observe(seconds)
            entries.observe(count)
            size.observe(length)

        stats.observers.append(observe)
        registry.register(_AppendFailures(stats))

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

    async def render_async(self) -> bytes:
        """:meth:`render`, with only the reading of the live state on the event loop: the
        formatting (most of the time with many topics) runs in a worker thread."""
        snapshot = _Snapshot(list(self.registry.collect()))
        return await asyncio.to_thread(generate_latest, snapshot)


class _AppendFailures:
    """Cluster mode's counterpart of the group commit's failure counter."""

    def __init__(self, stats: AppendStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "starquake_jetstream_append_failures",
            "Records JetStream refused or did not acknowledge (their ledgers were fenced and "
            "their topics loaded again).",
        )
        family.add_metric([], self._stats.failures)
        yield family


class _Snapshot:
    """Metric families already collected, served as a registry to the text formatter."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        """The families, as collected."""
        return iter(self._families)


_REGISTRIES: weakref.WeakValueDictionary[int, BrokerMetrics] = weakref.WeakValueDictionary()
"""Each broker's registry by the service's id (kept alive by the service's commit observers)."""


def metrics_of(service: BrokerService) -> BrokerMetrics:
    """The registry of ``service``, created on first use (the web layer creates it when it
    installs the routes, so that commits are observed from the start)."""
    metrics = _REGISTRIES.get(id(service))
    if metrics is None or metrics.owner() is not service:
        metrics = _REGISTRIES[id(service)] = BrokerMetrics(service)
    return metrics


async def scrape(service: BrokerService, call: Call) -> Reply:
    """The broker's metrics in Prometheus' text format."""
    try:
        body = await metrics_of(service).render_async()
    except Exception:
        log.exception("collecting metrics failed")
        return json_reply(500, {"reason": "collecting metrics failed; see the broker log"})
    return 200, CONTENT_TYPE_LATEST, body


ROUTES = [Route("GET", "/metrics/?", scrape, Need.NOTHING)]
"""The metrics endpoint (``/metrics`` and ``/metrics/``)."""
