"""Startup recovery of a managed ledger's directory.

Every ``<ledgerId>.log`` found becomes a sealed ledger. A ledger with a valid index file is loaded
from the index; any other one is scanned record by record and truncated (then fsynced) at the first
partial or corrupt record. Files left with no entries are removed, as are stray temporary and
orphaned index files.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .segment import read_index, scan_ledger_file, truncate_file
from .state import LedgerState

if TYPE_CHECKING:
    from .ledger import ManagedLedger

__all__ = ["recover_ledger_states"]


def recover_ledger_states(owner: ManagedLedger, directory: Path) -> list[LedgerState]:
    """Load every ledger of ``directory`` as a sealed :class:`LedgerState`, in id order."""
    names = set(os.listdir(directory))
    ids: list[int] = []
    for name in names:
        stem, _, ext = name.partition(".")
        if not stem.isdigit():
            continue
        if ext == "log":
            ids.append(int(stem))
        elif ext == "idx.tmp" or (ext == "idx" and f"{stem}.log" not in names):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / name)
    ids.sort()
    states: list[LedgerState] = []
    for ledger_id in ids:
        path = directory / f"{ledger_id}.log"
        stat = os.stat(path)
        size = stat.st_size
        state = LedgerState(owner, ledger_id, directory, stat.st_mtime)
        index = None
        if f"{ledger_id}.idx" in names:
            index = read_index(directory / f"{ledger_id}.idx", ledger_id, size)
        if index is not None:
            offsets, created_at = index
            state.created_at = created_at
            valid_end = size
            state.index_done = True
        else:
            scan = scan_ledger_file(path, ledger_id)
            offsets, valid_end = scan.offsets, scan.valid_end
            if not offsets:
                valid_end = 0
            if valid_end < size:
                if valid_end == 0:
                    os.unlink(path)
                else:
                    truncate_file(path, valid_end)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / f"{ledger_id}.idx")
        if not offsets:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            continue
        state.offsets = offsets
        state.entries = state.confirmed = len(offsets)
        state.end = state.confirmed_end = state.pending_offset = valid_end
        state.pending_first = state.entries
        state.cache_base = state.entries
        state.sealed = True
        states.append(state)
    return states
