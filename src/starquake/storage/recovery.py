"""Startup recovery of a managed ledger's directory.

Every ``<ledgerId>.log`` found becomes a sealed ledger. A ledger with a valid index file is loaded
from the index; any other one is scanned record by record. Damaged records followed by valid ones
keep their entry ids and are marked damaged (reads skip them); a torn tail is cut off, and the cut
bytes are kept in ``quarantine/`` (but for the zeros a file is preallocated with: cut silently). A
file with no whole record is removed when it holds no more than a file header and zeros (a ledger
created but never written), and otherwise moved to ``quarantine/``: valid data is never deleted.
Stray temporary and orphaned index files are removed. Everything but the ordinary torn tail of a
crash is logged as an error.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from .quarantine import quarantine
from .segment import (
    HEADER_SIZE,
    ScanResult,
    file_version,
    next_nonzero,
    read_index,
    scan_ledger_file,
    truncate_file,
)
from .state import LedgerOwner, LedgerState

__all__ = ["recover_ledger_states"]

log = logging.getLogger(__name__)


def _cut(path: Path, size: int, name: str, why: str) -> None:
    """Cut ``path`` to ``size`` bytes, keeping what was cut in quarantine under ``name``, and
    log it with the reason ``why``. Trailing zeros are not kept: a current ledger's file is
    zero-filled ahead of its writes, so a crash leaves such a tail (cut without a word).

    When the copy cannot be made (typically a full disk), the torn tail is left in the file
    instead (recovery ignores it, and tries again at the next load), so that the ledger still
    loads and its entries can be read.
    """
    try:
        actual = os.stat(path).st_size
    except FileNotFoundError:
        return
    if actual <= size:
        return
    with open(path, "rb") as f:
        f.seek(size)
        extra = f.read().rstrip(b"\0")  # zeros: the file's preallocated tail, not data
    if not extra:
        truncate_file(path, size)
        log.debug("ledger %s: cut its zero-filled tail of %d bytes", path, actual - size)
        return
    try:
        moved = quarantine(path.parent, name, data=extra)
    except OSError as exc:
        log.error(
            "ledger %s: %d bytes after offset %d (%s) cannot be kept in quarantine (%s); "
            "they stay in the file, ignored, until a later load",
            path,
            actual - size,
            size,
            why,
            exc,
        )
        return
    truncate_file(path, size)
    log.warning("ledger %s: cut %d bytes, %s (kept in %s)", path, actual - size, why, moved)


def _drop_unacknowledged(path: Path, size: int) -> None:
    """Cut the bytes a failed commit wrote after ``size``: their entries never became
    visible and no client holds a receipt for them, so they are not kept (a full disk fails
    every commit while clients retry; copies would pile up). The failed commit itself was
    logged when it failed."""
    try:
        actual = os.stat(path).st_size
    except FileNotFoundError:
        return
    if actual > size:
        truncate_file(path, size)
        log.debug("ledger %s: cut %d bytes a failed commit wrote", path, actual - size)


def _report(directory: Path, ledger_id: int, scan: ScanResult) -> None:
    if not scan.header_ok and scan.offsets:
        log.error(
            "ledger %s/%d.log has a damaged file header; its %d records are kept",
            directory,
            ledger_id,
            len(scan.offsets),
        )
    for start, end, first, lost in scan.regions:
        if lost == 0:
            log.error(
                "ledger %s/%d.log: bytes %d to %d are damaged and held no entry; skipped",
                directory,
                ledger_id,
                start,
                end,
            )
            continue
        log.error(
            "ledger %s/%d.log: %s damaged (checksum mismatch, bytes %d to %d): lost, skipped "
            "and counted as acknowledged; the entries after keep their ids",
            directory,
            ledger_id,
            f"entry {first} is" if lost == 1 else f"entries {first} to {first + lost - 1} are",
            start,
            end,
        )


def recover_ledger_states(
    owner: LedgerOwner,
    directory: Path,
    cuts: dict[Path, int] | None = None,
    removed: list[int] | None = None,
) -> list[LedgerState]:
    """Load every ledger of ``directory`` as a sealed :class:`LedgerState`, in id order.

    ``cuts`` maps files to the size they had before a failed commit wrote to them: the bytes
    after it were never acknowledged, so they are cut off first. The ids of ledgers removed
    because they held nothing (created, never written) are appended to ``removed``.
    """
    for path, size in (cuts or {}).items():
        _drop_unacknowledged(path, size)
    names = set(os.listdir(directory))
    states: list[LedgerState] = []
    for ledger_id in _ledger_ids(directory, names):
        state = _load_ledger(owner, directory, ledger_id, names)
        if state is not None:
            states.append(state)
        elif removed is not None and not (directory / f"{ledger_id}.log").exists():
            removed.append(ledger_id)
    return states


def _ledger_ids(directory: Path, names: set[str]) -> list[int]:
    """The ids of the ledger files among ``names`` (sorted); stray index files are removed."""
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
    return ids


def _load_ledger(
    owner: LedgerOwner, directory: Path, ledger_id: int, names: set[str]
) -> LedgerState | None:
    """One sealed ledger, from its index file or else by a scan; None when it holds nothing."""
    path = directory / f"{ledger_id}.log"
    stat = os.stat(path)
    size = stat.st_size
    state = LedgerState(owner, ledger_id, directory, stat.st_mtime)
    index = version = None
    if f"{ledger_id}.idx" in names:
        index = read_index(directory / f"{ledger_id}.idx", ledger_id, size)
        version = file_version(path, ledger_id) if index is not None else None
    if index is not None and version is not None:
        offsets, created_at = index
        state.created_at = created_at
        state.version = version
        valid_end = size
        state.index_done = True
    else:
        scan = scan_ledger_file(path, ledger_id)
        offsets, valid_end = scan.offsets, scan.valid_end
        _report(directory, ledger_id, scan)
        if not offsets:
            _drop_empty(path, size, directory, ledger_id)
            return None
        if valid_end < size:
            why = f"a torn tail after entry {len(offsets) - 1}"
            _cut(path, valid_end, f"{ledger_id}.log.tail-{valid_end}", why)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / f"{ledger_id}.idx")
        state.damaged.update(scan.damaged)
        state.version = scan.version
    state.offsets = offsets
    state.entries = state.confirmed = len(offsets)
    state.end = state.confirmed_end = state.pending_offset = valid_end
    state.pending_first = state.entries
    state.cache_base = state.entries
    state.sealed = True
    return state


def _drop_empty(path: Path, size: int, directory: Path, ledger_id: int) -> None:
    """Remove a ledger file with no whole record: deleted when it holds no more than a file
    header and zeros, else moved to quarantine (valid data is never deleted)."""
    if size > HEADER_SIZE and _holds_data(path):
        try:
            moved: Path | str = quarantine(directory, f"{ledger_id}.log", source=path)
        except OSError as exc:  # e.g. a full disk: left where it is, ignored
            moved = f"nowhere, it stays ({exc})"
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


def _holds_data(path: Path) -> bool:
    """Whether a ledger file holds anything but zeros after its file header."""
    with open(path, "rb") as f:
        f.seek(HEADER_SIZE)
        return next_nonzero(f.read(), 0) >= 0
