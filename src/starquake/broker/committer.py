"""Group commit: appends from every topic share one write + fsync, run off the event loop.

While one commit executes in the worker thread, new appends accumulate; the next commit takes
all of them at once, so under load many entries share each fsync (BookKeeper's journal does the
same). At most one commit executes at a time, which keeps each ledger's bytes in order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from starquake.broker.log_throttle import LogThrottle
from starquake.storage import ManagedLedger, PendingCommit, Position

log = logging.getLogger(__name__)

CommittedCallback = Callable[[Sequence[tuple[ManagedLedger, Position]]], None]
FailedCallback = Callable[[Sequence[ManagedLedger], BaseException], None]
CommitObserver = Callable[[PendingCommit], None]


class CommitSource(Protocol):
    """Where the group commit takes its work: the file ledgers' pending appends."""

    def take_pending(self) -> PendingCommit | None:
        """The work waiting to be committed, or None."""


class GroupCommitter:
    """Runs the commits of a :class:`CommitSource` one after another while work is pending."""

    def __init__(
        self,
        factory: CommitSource,
        on_committed: CommittedCallback,
        on_failed: FailedCallback,
    ) -> None:
        self._factory = factory
        self._on_committed = on_committed
        self._on_failed = on_failed
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="starquake-sync")
        self._task: asyncio.Task[None] | None = None
        self._kicked = False
        self.commits = 0
        self.failures = 0
        # a full disk fails every commit while clients keep reconnecting: one line per 10 s
        self._failure_log = LogThrottle(log)
        self.observers: list[CommitObserver] = []
        """Called on the loop with each commit that succeeded, after its receipts (metrics)."""

    def kick(self) -> None:
        """There is something to commit: start a commit loop if none is running."""
        self._kicked = True
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def _start_next(self) -> tuple[PendingCommit, asyncio.Future[None]] | None:
        self._kicked = False
        pending = self._factory.take_pending()
        if pending is None:
            return None
        future = asyncio.get_running_loop().run_in_executor(self._executor, pending.execute)
        return pending, future

    async def _run(self) -> None:
        # The next commit starts executing before the previous one's receipts are sent, so the
        # worker thread writes and fsyncs while the loop answers producers and reads more sends.
        try:
            inflight = self._start_next()
            while inflight is not None:
                pending, future = inflight
                try:
                    await future
                except Exception as exc:
                    self._failure_log.log(logging.ERROR, "group commit failed: %s", exc)
                    self.failures += 1
                    failed = pending.fail(exc)
                    self._on_failed(failed, exc)
                    inflight = self._start_next()
                    continue
                results = pending.finish()
                self.commits += 1
                inflight = self._start_next()
                self._on_committed(results)
                for observe in self.observers:
                    try:
                        observe(pending)
                    except Exception:
                        log.exception("group commit observer failed")
                if inflight is None and self._kicked:
                    inflight = self._start_next()
        finally:
            self._task = None

    async def drain(self) -> None:
        """Wait until everything appended so far is committed."""
        self.kick()
        while self._task is not None:
            await asyncio.shield(self._task)

    def close(self) -> None:
        """Wait for the commit under way and stop the commit thread."""
        self._executor.shutdown(wait=True)
