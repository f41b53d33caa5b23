"""Group commit: appends from every topic share one write + fsync, run off the event loop.

Commits form a pipeline: the loop takes the appends waiting (up to the commit's byte budget)
whenever fewer than ``PIPELINE_DEPTH`` commits are under way, the write thread writes them in
order, and the fsync thread makes durable, with one fsync per file, every commit written
while its previous fsync ran: commits are written while earlier ones are flushed, the loop
goes on reading sends meanwhile, and small commits do not queue one fsync each. Under load
many entries share each fsync (BookKeeper's journal does the same), and small groups keep the
receipts flowing back while the next sends are read. Commits complete in the order they were taken,
which keeps each ledger's bytes in order. A commit that is the only one under way when it starts
is written and fsynced by the write thread in one go: a lone send's receipt then waits for one
thread hand-off instead of two (about a tenth of a blocking send's round trip here), and the
commits taken while it runs are written once it is done.

A commit that seals a ledger runs alone (written and fsynced in the write thread once the ones
before it are done, nothing taken after it until it is done): a sealed ledger's bytes must be
durable before a later file is written. When a commit fails, every commit taken before the
failure was known fails too: their bytes follow lost ones.

The files of trimmed ledgers a commit was to delete are removed in a third thread: their
receipts do not wait for it, and the write and fsync threads go on meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Protocol

from starquake.broker.log_throttle import LogThrottle
from starquake.storage import ManagedLedger, PendingCommit, Position

log = logging.getLogger(__name__)

CommittedCallback = Callable[[Sequence[tuple[ManagedLedger, Position]]], None]
FailedCallback = Callable[[Sequence[ManagedLedger], BaseException], None]
CommitObserver = Callable[[PendingCommit], None]

PIPELINE_DEPTH = 4
"""Commits under way at once (taken, being written, or waiting for their fsync)."""
INLINE_WRITE_MAX_BYTES = 256 * 1024
"""Without fsync (``journalSyncData=false``) the loop writes a commit of at most this many
bytes itself, when no other commit is under way: a copy into the page cache of tens of
microseconds, where handing it to the write thread and back costs more (the threads share the
interpreter's lock with the loop)."""


class CommitSource(Protocol):
    """Where the group commit takes its work: the file ledgers' pending appends."""

    def take_pending(self) -> PendingCommit | None:
        """The work waiting to be committed, or None."""


def _attempt(step: Callable[[], None]) -> BaseException | None:
    """Run one stage of a commit; what it raised (None: it succeeded)."""
    try:
        step()
    except BaseException as exc:
        return exc
    return None


class _Inflight:
    """A commit taken. ``started``: handed to the threads; ``ended``: the threads are done
    with it (``error`` says how); ``doomed``: an earlier commit failed, so this one fails."""

    __slots__ = ("alone", "doomed", "ended", "error", "pending", "started")

    def __init__(self, pending: PendingCommit) -> None:
        self.pending = pending
        self.alone = pending.runs_alone
        self.started = False
        self.ended = False
        self.error: BaseException | None = None
        self.doomed: BaseException | None = None


class GroupCommitter:
    """Runs the commits of a :class:`CommitSource` as a pipeline while work is pending."""

    def __init__(
        self,
        factory: CommitSource,
        on_committed: CommittedCallback,
        on_failed: FailedCallback,
        depth: int = PIPELINE_DEPTH,
    ) -> None:
        self._factory = factory
        self._on_committed = on_committed
        self._on_failed = on_failed
        self._depth = max(1, depth)
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="starquake-write")
        self._syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="starquake-fsync")
        self._deleter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="starquake-delete")
        self._deleting: list[Future[None]] = []
        self._written_lock = threading.Lock()
        self._written: list[_Inflight] = []  # written, for the fsync thread (under the lock)
        self._syncing = False  # the fsync thread is taking them (under the lock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inflight: deque[_Inflight] = deque()
        self._pump_scheduled = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self.commits = 0
        self.failures = 0
        # a full disk fails every commit while clients keep reconnecting: one line per 10 s
        self._failure_log = LogThrottle(log)
        self.observers: list[CommitObserver] = []
        """Called on the loop with each commit that succeeded, after its receipts (metrics)."""

    def kick(self) -> None:
        """There is something to commit: take it once the current callback is done (so that
        the appends of one read share a commit)."""
        if not self._pump_scheduled:
            self._pump_scheduled = True
            self._loop = loop = asyncio.get_running_loop()
            loop.call_soon(self._pump)

    def _pump(self) -> None:
        """Take commits while the pipeline has room; a commit that runs alone ends the round."""
        self._pump_scheduled = False
        inflight = self._inflight
        taken: list[_Inflight] = []
        while len(inflight) < self._depth and not (inflight and inflight[-1].alone):
            pending = self._factory.take_pending()
            if pending is None:
                break
            commit = _Inflight(pending)
            inflight.append(commit)
            if not commit.alone or len(inflight) == 1:
                taken.append(commit)
        for commit in taken:  # once all are taken: whether a commit is alone under way is known
            self._start(commit)
        if not inflight:
            waiters, self._drain_waiters = self._drain_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def _start(self, commit: _Inflight) -> None:
        commit.started = True
        pending = commit.pending
        deletes = pending.take_delete_jobs()
        if deletes:
            self._deleting = [f for f in self._deleting if not f.done()]
            self._deleting += [self._deleter.submit(job.run) for job in deletes]
        if pending.splittable and len(self._inflight) > 1:
            self._writer.submit(self._write, commit)
        elif len(self._inflight) == 1 and pending.writes_only(INLINE_WRITE_MAX_BYTES):
            self._write_here(commit)
        else:
            self._writer.submit(self._execute, commit)

    def _write_here(self, commit: _Inflight) -> None:
        """Loop side: a commit that only copies a little into the page cache is cheaper than
        the two thread hand-offs it would take."""
        try:
            commit.pending.execute()
        except Exception as exc:
            commit.error = exc
        asyncio.get_running_loop().call_soon(self._on_ended, commit)

    # --- thread side --------------------------------------------------------------------------

    def _execute(self, commit: _Inflight) -> None:
        """Write thread: write and fsync (if it syncs at all) in one go."""
        self._ended(commit, _attempt(commit.pending.execute))

    def _write(self, commit: _Inflight) -> None:
        """Write thread: write, then hand the commit to the fsync thread (started unless it
        is running: it takes what was written meanwhile when its fsync is done)."""
        error = _attempt(commit.pending.write)
        if error is not None:
            self._ended(commit, error)
            return
        with self._written_lock:
            self._written.append(commit)
            if self._syncing:
                return
            self._syncing = True
        self._syncer.submit(self._sync_written)

    def _sync_written(self) -> None:
        """Fsync thread: make every commit written so far durable with one fsync per file,
        until none is left."""
        while True:
            with self._written_lock:
                group = self._written
                if not group:
                    self._syncing = False
                    return
                self._written = []
            error = _attempt(partial(PendingCommit.sync_together, [c.pending for c in group]))
            for commit in group:
                self._ended(commit, error)

    def _ended(self, commit: _Inflight, error: BaseException | None) -> None:
        commit.error = error
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._on_ended, commit)

    # --- loop side ----------------------------------------------------------------------------

    def _on_ended(self, commit: _Inflight) -> None:
        commit.ended = True
        inflight = self._inflight
        while inflight:
            head = inflight[0]
            if head.started and not head.ended:
                break
            inflight.popleft()
            error = head.doomed or head.error
            if error is not None:
                for later in inflight:  # taken before the failure: their bytes follow
                    later.doomed = later.doomed or error
                self._fail(head.pending, error)
            else:
                self._complete(head.pending)
            if inflight and not inflight[0].started and inflight[0].doomed is None:
                self._start(inflight[0])  # one that runs alone, now first
        self._pump()

    def _complete(self, pending: PendingCommit) -> None:
        results = pending.finish()
        self.commits += 1
        try:
            self._on_committed(results)
        except Exception:
            log.exception("group commit callback failed")
        for observe in self.observers:
            try:
                observe(pending)
            except Exception:
                log.exception("group commit observer failed")

    def _fail(self, pending: PendingCommit, exc: BaseException) -> None:
        self._failure_log.log(logging.ERROR, "group commit failed: %s", exc)
        self.failures += 1
        try:
            self._on_failed(pending.fail(exc), exc)
        except Exception:
            log.exception("group commit failure callback failed")

    async def drain(self) -> None:
        """Wait until everything appended so far is committed (and the files to delete so
        far are deleted)."""
        self.kick()
        loop = asyncio.get_running_loop()
        while self._inflight or self._pump_scheduled:
            waiter: asyncio.Future[None] = loop.create_future()
            self._drain_waiters.append(waiter)
            await waiter
        deleting, self._deleting = self._deleting, []
        for future in deleting:
            await asyncio.wrap_future(future)

    def close(self) -> None:
        """Wait for the commits under way and stop the commit threads."""
        self._writer.shutdown(wait=True)
        self._syncer.shutdown(wait=True)
        self._deleter.shutdown(wait=True)
