"""Group commit: appends from every topic share one write + fsync, run off the event loop.

While one commit executes in the worker thread, new appends accumulate; the next commit takes
them (up to the commit's byte budget), so under load many entries share each fsync (BookKeeper's
journal does the same). Commits complete in the order they were taken, which keeps each ledger's
bytes in order. When appends are left over the budget, a commit is written by the write thread
and fsynced by the sync thread, and the next one is written meanwhile: the disk flushes one
commit while the next one's bytes are copied, and receipts of each commit go out as soon as
it is synced.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
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


_SyncFuture = concurrent.futures.Future[None]


def _execute(pending: PendingCommit) -> _SyncFuture | None:
    """Write thread: write and fsync ``pending`` in one go."""
    pending.execute()
    return None


class _Inflight:
    """A commit taken: ``written`` resolves once its bytes are written (to the future of its
    fsync when that runs apart; None until the commit is started), ``doomed`` is set when an
    earlier commit failed (its bytes follow lost ones: it must fail too)."""

    __slots__ = ("doomed", "pending", "written")

    def __init__(self, pending: PendingCommit) -> None:
        self.pending = pending
        self.written: asyncio.Future[_SyncFuture | None] | None = None
        self.doomed: BaseException | None = None


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
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="starquake-write")
        self._syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="starquake-fsync")
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

    def _take(self, *, start: bool = True) -> _Inflight | None:
        """The next commit, started unless ``start`` is False (None: nothing to commit)."""
        self._kicked = False
        pending = self._factory.take_pending()
        if pending is None:
            return None
        inflight = _Inflight(pending)
        if start:
            self._start(inflight)
        return inflight

    def _start(self, inflight: _Inflight) -> None:
        pending = inflight.pending
        run = self._write_then_sync if pending.splittable else _execute
        inflight.written = asyncio.get_running_loop().run_in_executor(self._executor, run, pending)

    def _write_then_sync(self, pending: PendingCommit) -> _SyncFuture | None:
        """Write thread: write ``pending``, queue its fsync behind the earlier ones'."""
        pending.write()
        return self._syncer.submit(pending.sync)

    async def _run(self) -> None:
        # The next commit starts before the previous one's receipts are sent, so the threads
        # write and fsync while the loop answers producers and reads more sends; with appends
        # over the budget it is written while the previous one is fsynced. All fsyncs of
        # overlapping commits run in the fsync thread, in order: a commit that would fsync in
        # the write thread (one sealing a ledger) waits until the one before is done, since a
        # failed fsync's error is reported to one caller only and must fail every commit
        # behind it.
        try:
            current = self._take()
            while current is not None:
                if current.written is None and current.doomed is None:
                    self._start(current)  # taken while the one before was being fsynced
                after: _Inflight | None = None
                error = current.doomed
                try:
                    if current.written is not None:
                        syncing = await current.written
                        if syncing is not None and error is None:  # its fsync runs apart
                            after = self._take(start=False)
                            if after is not None and after.pending.splittable:
                                self._start(after)  # written meanwhile, fsynced after it
                        if syncing is not None:
                            await asyncio.wrap_future(syncing)
                except Exception as exc:
                    error = error or exc
                if error is not None:
                    self._fail(current.pending, error)
                    if after is not None:
                        after.doomed = error  # taken before the failure: its bytes follow
                    current = after or self._take()
                    continue
                done = current.pending
                results = done.finish()
                self.commits += 1
                if after is not None and after.written is None:
                    self._start(after)
                current = after or self._take()
                self._on_committed(results)
                for observe in self.observers:
                    try:
                        observe(done)
                    except Exception:
                        log.exception("group commit observer failed")
                if current is None and self._kicked:  # appended by the callbacks
                    current = self._take()
        finally:
            self._task = None

    def _fail(self, pending: PendingCommit, exc: BaseException) -> None:
        self._failure_log.log(logging.ERROR, "group commit failed: %s", exc)
        self.failures += 1
        self._on_failed(pending.fail(exc), exc)

    async def drain(self) -> None:
        """Wait until everything appended so far is committed."""
        self.kick()
        while self._task is not None:
            await asyncio.shield(self._task)

    def close(self) -> None:
        """Wait for the commits under way and stop the commit threads."""
        self._executor.shutdown(wait=True)
        self._syncer.shutdown(wait=True)
