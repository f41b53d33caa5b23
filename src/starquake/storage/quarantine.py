"""Damaged bytes of a ledger file are kept aside, never deleted: ``quarantine/`` in the ledger's
directory."""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from pathlib import Path

from .segment import fsync_dir, write_file

__all__ = ["quarantine"]

_quarantined = itertools.count()


def quarantine(
    directory: Path, name: str, data: bytes | None = None, source: Path | None = None
) -> Path:
    """Keep damaged bytes in ``directory/quarantine/`` instead of deleting them.

    Either writes ``data`` to a new file or moves ``source`` there; returns the new path. Names
    are unique (time, process id and a counter): a retry never collides with an earlier file.
    """
    folder = directory / "quarantine"
    if not folder.exists():
        folder.mkdir()
        fsync_dir(directory)
    stamp = f"{name}.{time.strftime('%Y%m%dT%H%M%S')}.{os.getpid()}"
    while True:
        target = folder / f"{stamp}.{next(_quarantined)}"
        if source is not None:
            if target.exists():
                continue
            os.replace(source, target)
        else:
            try:
                write_file(target, data or b"", exclusive=True)
            except FileExistsError:
                continue
            except OSError:
                with contextlib.suppress(OSError):
                    target.unlink()  # e.g. the disk is full: leave no partial copy behind
                raise
        break
    fsync_dir(folder)
    fsync_dir(directory)
    return target
