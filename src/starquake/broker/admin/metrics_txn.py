"""The transaction coordinators' metrics, with Pulsar's names and labels (``cluster``,
``coordinator_id``): transactions ongoing now, and those created, committed, aborted and timed
out since the broker started. Nothing is exposed with transactions off."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

_LABELS = ["cluster", "coordinator_id"]


class TransactionCollector:
    """Reads the coordinators' counts when the registry is collected."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service

    def describe(self) -> list[Metric]:
        """The metric families (without samples), for the registry's name clash check."""
        return list(self._families().values())

    @staticmethod
    def _families() -> dict[str, Metric]:
        def counter(name: str, doc: str) -> Metric:
            return CounterMetricFamily(name, doc, labels=_LABELS)

        return {
            "active": GaugeMetricFamily(
                "pulsar_txn_active_count", "Transactions ongoing.", labels=_LABELS
            ),
            "created": counter("pulsar_txn_created", "Transactions created."),
            "committed": counter("pulsar_txn_committed", "Transactions committed."),
            "aborted": counter("pulsar_txn_aborted", "Transactions aborted."),
            "timed_out": counter("pulsar_txn_timeout", "Transactions timed out (aborted)."),
        }

    def collect(self) -> list[Metric]:
        """The coordinators' figures at this instant."""
        transactions = self._service.transactions
        if not transactions.enabled:
            return []
        families = self._families()
        cluster = self._service.config.clusterName
        for tc_id, coordinator in sorted(transactions.coordinators.items()):
            labels = [cluster, str(tc_id)]
            counts = coordinator.counts
            families["active"].add_metric(labels, len(coordinator.state.txns))  # type: ignore[attr-defined]
            for key in ("created", "committed", "aborted", "timed_out"):
                families[key].add_metric(labels, getattr(counts, key))  # type: ignore[attr-defined]
        return list(families.values())
