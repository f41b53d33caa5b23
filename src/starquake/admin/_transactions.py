"""Admin calls on transactions (``/admin/v3/transactions``, Pulsar's paths)."""

from __future__ import annotations

from typing import Any

from starquake.admin._base import Group, quote

V3_TRANSACTIONS = "/admin/v3/transactions"


class Transactions(Group):
    """The transaction coordinators, buffers and pending acks (super-user only)."""

    def coordinator_stats(self, coordinator_id: int | None = None) -> dict[str, Any]:
        """One coordinator's stats, or every coordinator's by id (``None``)."""
        path = f"{V3_TRANSACTIONS}/coordinators"
        if coordinator_id is not None:
            path += f"/{coordinator_id}"
        return dict(self._call("GET", path))

    def transaction_metadata(self, most_sig_bits: int, least_sig_bits: int) -> dict[str, Any]:
        """An ongoing transaction's metadata."""
        path = f"{V3_TRANSACTIONS}/transactionMetadata/{most_sig_bits}/{least_sig_bits}"
        return dict(self._call("GET", path))

    def transaction_buffer_stats(self, topic: str) -> dict[str, Any]:
        """A persistent topic's transaction buffer (``tenant/namespace/topic`` or a full name)."""
        return dict(self._call("GET", f"{V3_TRANSACTIONS}/transactionBufferStats/{_short(topic)}"))

    def pending_ack_stats(self, topic: str, subscription: str) -> dict[str, Any]:
        """A subscription's pending acks."""
        path = f"{V3_TRANSACTIONS}/pendingAckStats/{_short(topic)}/{quote(subscription)}"
        return dict(self._call("GET", path))

    def slow_transactions(self, timeout_ms: int) -> dict[str, Any]:
        """The ongoing transactions opened more than ``timeout_ms`` ago, by id."""
        return dict(self._call("GET", f"{V3_TRANSACTIONS}/slowTransactions/{timeout_ms}"))


def _short(topic: str) -> str:
    name = topic.split("://", 1)[1] if "://" in topic else topic
    parts = name.split("/")
    if len(parts) == 1:
        parts = ["public", "default", *parts]
    return "/".join(quote(p) for p in parts)
