"""Startup recovery of a managed ledger's directory.

Every ``<ledgerId>.log`` found becomes a sealed ledger. A ledger with a valid index file is loaded
from the index; any other one is scanned record by record. A damaged record followed by valid ones
keeps its entry id and is marked damaged (reads skip it); a torn tail is cut off, and the cut bytes
are kept in ``quarantine/``. A file with no whole record is removed when it holds no more than a
file header (a ledger created but never written), and otherwise moved to ``quarantine/``: valid
data is never deleted. Stray temporary and orphaned index files are removed. Everything but the
ordinary torn tail of a crash is logged as an error.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .segment import (
    HEADER_SIZE,
    ScanResult,
    quarantine,
    read_index,
    scan_ledger_file,
    truncate_file,
)
from .state import LedgerState

if TYPE_CHECKING:
    from .ledger import ManagedLedger

__all__ = ["recover_ledger_states"]

log = logging.getLogger(__name__)


def _cut(path: Path, size: int, name: str, why: str) -> None:
    """Cut ``path`` to ``size`` bytes, keeping what was cut in quarantine under ``name``, and
    log it with the reason ``why``."""
    try:
        actual = os.stat(path).st_size
    except FileNotFoundError:
        return
    if actual <= size:
        return
    with open(path, "rb") as f:
        f.seek(size)
        extra = f.read()
    moved = quarantine(path.parent, name, data=extra)
    truncate_file(path, size)
    log.warning("ledger %s: cut %d bytes, %s (kept in %s)", path, actual - size, why, moved)


def _report(directory: Path, ledger_id: int, scan: ScanResult) -> None:
    if not scan.header_ok and scan.offsets:
        log.error(
            "ledger %s/%d.log has a damaged file header; its %d records are kept",
            directory,
            ledger_id,
            len(scan.offsets),
        )
    for entry_id in scan.damaged:
        log.error(
            "ledger %s/%d.log: entry %d is damaged (checksum mismatch) and will be skipped; "
            "the entries after it are intact",
            directory,
            ledger_id,
            entry_id,
        )


def recover_ledger_states(
    owner: ManagedLedger, directory: Path, cuts: dict[Path, int] | None = None
) -> list[LedgerState]:
    """Load every ledger of ``directory`` as a sealed :class:`LedgerState`, in id order.

    ``cuts`` maps files to the size they had before a failed commit wrote to them: the bytes
    after it were never acknowledged, so they are cut off (and kept in quarantine) first.
    """
    for path, size in (cuts or {}).items():
        why = "written by a failed commit, never acknowledged"
        _cut(path, size, f"{path.name}.unacknowledged-{size}", why)
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
            _report(directory, ledger_id, scan)
            if not offsets:
                if size > HEADER_SIZE:
                    moved = quarantine(directory, f"{ledger_id}.log", source=path)
                    log.error(
                        "ledger file %s holds no readable record (%d bytes); moved to %s",
                        path,
                        size,
                        moved,
                    )
                else:
                    os.unlink(path)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(directory / f"{ledger_id}.idx")
                continue
            if valid_end < size:
                why = f"a torn tail after entry {len(offsets) - 1}"
                _cut(path, valid_end, f"{ledger_id}.log.tail-{valid_end}", why)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / f"{ledger_id}.idx")
            state.damaged.update(scan.damaged)
        state.offsets = offsets
        state.entries = state.confirmed = len(offsets)
        state.end = state.confirmed_end = state.pending_offset = valid_end
        state.pending_first = state.entries
        state.cache_base = state.entries
        state.sealed = True
        states.append(state)
    return states
