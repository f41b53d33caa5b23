"""The compaction state of one loaded topic: its compacted view and its last compaction.

As in Pulsar, the status of the last compaction is kept in memory: a topic loaded afresh
reports ``NOT_RUN`` until a compaction runs on it, whatever view it has on disk.
"""

from __future__ import annotations

from typing import Any

from starquake.broker.compaction.view import CompactedView

__all__ = ["ERROR", "NOT_RUN", "RUNNING", "SUCCESS", "TopicCompaction"]

NOT_RUN = "NOT_RUN"
RUNNING = "RUNNING"
SUCCESS = "SUCCESS"
ERROR = "ERROR"


class TopicCompaction:
    """Compacted view, status and statistics of a topic's compactions."""

    def __init__(self) -> None:
        self.view: CompactedView | None = None
        self.status = NOT_RUN
        self.last_error = ""
        self.closed = False
        """The topic was closed (unloaded or deleted): a running compaction must not commit."""
        self.removed_events = 0
        self.succeeded_at_ms = 0
        self.failed_at_ms = 0
        self.duration_ms = 0

    @property
    def running(self) -> bool:
        """Whether a compaction of the topic is under way."""
        return self.status == RUNNING

    def install(self, view: CompactedView | None) -> None:
        """Serve ``view`` from now on; the previous view is closed."""
        previous, self.view = self.view, view
        if previous is not None and previous is not view:
            previous.close()

    def status_json(self) -> dict[str, Any]:
        """Pulsar's LongRunningProcessStatus."""
        return {"status": self.status, "lastError": self.last_error}

    def stats_json(self) -> dict[str, Any]:
        """The ``compaction`` part of the topic's stats (Pulsar's CompactionStats)."""
        return {
            "lastCompactionRemovedEventCount": self.removed_events,
            "lastCompactionSucceedTimestamp": self.succeeded_at_ms,
            "lastCompactionFailedTimestamp": self.failed_at_ms,
            "lastCompactionDurationTimeInMills": self.duration_ms,
        }

    def compacted_ledger_json(self) -> dict[str, Any]:
        """The ``compactedLedger`` part of the topic's internal stats (-1 when there is none)."""
        view = self.view
        return {
            "ledgerId": view.ledger_id if view is not None else -1,
            "entries": view.entries if view is not None else -1,
            "size": view.size if view is not None else -1,
            "offloaded": False,
            "underReplicated": False,
        }

    def close(self) -> None:
        """The topic is closing: stop serving the view; a running compaction gives up."""
        self.closed = True
        self.install(None)
