"""Bytes on disk under a directory, for tests and benchmarks of retention."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


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


@contextlib.contextmanager
def tiny_disk(where: Path, size: str = "4m") -> Iterator[Path]:
    """A real file system of ``size`` mounted at ``where`` (a tmpfs), to fill up in tests;
    unmounted at the end. Skips the test where mounting needs root and the process is not."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a real full disk needs a tmpfs mount (root)")
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill_disk(where: Path, leave: int) -> Path:
    """Fill the file system of ``where`` with one file until about ``leave`` bytes are free."""
    filler = where / "filler"
    free = shutil.disk_usage(where).free
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler
