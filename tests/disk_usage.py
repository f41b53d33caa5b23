"""Bytes on disk under a directory, for tests and benchmarks of retention."""

from __future__ import annotations

from pathlib import Path


def disk_bytes(directory: Path) -> int:
    """Bytes of every file under ``directory`` (files deleted during the walk count as 0)."""
    total = 0
    for path in directory.rglob("*"):
        try:
            if path.is_file():
                total += path.stat().st_size
        except FileNotFoundError:  # deleted by a trim during the walk
            pass
    return total
