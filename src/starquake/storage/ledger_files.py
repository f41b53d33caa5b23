"""The descriptors of a factory's ledger files: write descriptors of the current ledgers,
bounded (a new ledger's file is opened by the commit of its first appends; the least recently
written idle ones are closed and opened again by the commit of their next appends, so that
many managed ledgers do not use up the process's descriptors), and a small cache of read-only
descriptors of the other ledgers. LOOP side only."""

from __future__ import annotations

import contextlib
import os
from collections import OrderedDict

from starquake.common.descriptors import descriptor_limit

from .position import StorageError
from .state import LedgerState

__all__ = ["MAX_READ_FDS", "LedgerFiles", "write_fd_limit"]

MAX_READ_FDS = 128
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def write_fd_limit(configured: int) -> int:
    """How many ledger files stay open for writing (``max_open_write_files``; 0: half the
    process's open-file limit, 65,536 without one)."""
    if configured > 0:
        return configured
    return max(64, descriptor_limit(unlimited=1 << 17) // 2)


class LedgerFiles:
    """Open write and read descriptors of ledger files (see the module docstring)."""

    def __init__(self, max_write_fds: int) -> None:
        self.max_write_fds = max_write_fds
        self._write: OrderedDict[LedgerState, None] = OrderedDict()
        """Ledgers with an open write fd, least recently written first."""
        self._read: OrderedDict[LedgerState, int] = OrderedDict()

    def written(self, state: LedgerState) -> None:
        """A commit takes appends of ``state``: it is the most recently written now."""
        if state in self._write:
            self._write.move_to_end(state)

    def trim(self) -> None:
        """Close idle write fds while over the limit (files being written stay open)."""
        if len(self._write) > self.max_write_fds:
            self._close_idle(None, len(self._write) - self.max_write_fds)

    def make_room(self) -> bool:
        """Whether one more file can be opened for writing within the limit (the least
        recently written idle one is closed for it if need be)."""
        if len(self._write) >= self.max_write_fds:
            self._close_idle(None, len(self._write) - self.max_write_fds + 1)
        return len(self._write) < self.max_write_fds

    def _opened(self, state: LedgerState) -> None:
        """``state``'s file was opened for writing (``state.fd``)."""
        self._write[state] = None
        if len(self._write) > self.max_write_fds:
            self._close_idle(state, len(self._write) - self.max_write_fds)

    def released(self, state: LedgerState) -> None:
        """``state``'s write fd was closed for good (its ledger sealed, closed or dropped)."""
        self._write.pop(state, None)

    def _close_idle(self, keep: LedgerState | None, excess: int) -> None:
        fds = self._write
        idle: list[LedgerState] = []
        for old in fds:
            busy = old.inflight or old.pending or old.fd < 0
            if old is not keep and not (busy or old.sealed or old.dropped or old.owner.closed):
                idle.append(old)
                if len(idle) >= excess:
                    break
        for old in idle:
            del fds[old]
            with contextlib.suppress(OSError):
                os.close(old.fd)
            old.fd = -1

    def reopen(self, state: LedgerState) -> None:
        """Open the file of a current ledger, new or closed while idle, for a commit to write
        its appends."""
        try:
            state.fd = os.open(state.path, os.O_RDWR | _CLOEXEC)
        except OSError as exc:
            raise StorageError(f"cannot open ledger file {state.path}: {exc}") from exc
        self._opened(state)

    def read_fd(self, state: LedgerState) -> int:
        """A descriptor to pread ``state``'s file (its write fd, or a cached read-only one)."""
        if state.fd >= 0:
            return state.fd
        fds = self._read
        fd = fds.get(state)
        if fd is not None:
            fds.move_to_end(state)
            return fd
        try:
            fd = os.open(state.path, os.O_RDONLY | _CLOEXEC)
        except OSError as exc:
            raise StorageError(f"cannot open {state.path}: {exc}") from exc
        fds[state] = fd
        while len(fds) > MAX_READ_FDS:
            _, old = fds.popitem(last=False)
            os.close(old)
        return fd

    def forget(self, state: LedgerState) -> None:
        """Close ``state``'s read fd, if one is cached (its ledger trimmed, closed, deleted)."""
        fd = self._read.pop(state, None)
        if fd is not None:
            os.close(fd)

    def close_reads(self) -> None:
        """Close every cached read fd."""
        for fd in self._read.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._read.clear()
