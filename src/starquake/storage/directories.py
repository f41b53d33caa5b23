"""The directories of managed ledgers under a factory's base directory, by name.

A managed ledger's directory is its percent-encoded name or, when that is too long for a file
name, a prefix of it and a hash (the full name then kept in a file inside). A deleted managed
ledger's directory is first renamed aside (:func:`detached_path`), then removed off the event
loop; such a directory is no managed ledger, and one a crash left behind is removed at the
next start.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from urllib.parse import quote, unquote

from .segment import write_file

__all__ = ["detached_path", "directory_name", "leftover_detached", "stored_names", "write_name"]

_MAX_DIRECTORY_NAME = 200  # bytes; file systems allow 255
_HASHED_MARK = "%~"  # never produced by percent-encoding, which always follows % with hex digits
_DETACHED_MARK = "%+"  # nor this
_NAME_FILE = "name"


def _name_hash(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:32]


def directory_name(name: str) -> str:
    """The directory of managed ledger ``name``: its percent-encoded name or, when that is too
    long for a file name, a prefix of it plus a hash (the full name is then kept in a file)."""
    encoded = quote(name, safe="")
    if len(encoded) <= _MAX_DIRECTORY_NAME:
        return encoded
    return encoded[:120].rstrip("%0123456789ABCDEF") + _HASHED_MARK + _name_hash(name)


def write_name(directory: Path, name: str) -> None:
    """Keep ``name`` in its new ``directory`` when the directory's name is a hash of it."""
    if directory.name.endswith(_HASHED_MARK + _name_hash(name)):
        write_file(directory / _NAME_FILE, name.encode())


def stored_names(base_dir: Path) -> list[str]:
    """Names of the managed ledgers with a directory in ``base_dir`` (sorted)."""
    try:
        entries = os.listdir(base_dir)
    except FileNotFoundError:
        return []
    names = []
    for entry in entries:
        path = base_dir / entry
        if entry.startswith(_DETACHED_MARK) or not path.is_dir():
            continue
        if _HASHED_MARK in entry:
            try:
                names.append((path / _NAME_FILE).read_bytes().decode())
            except (OSError, UnicodeDecodeError):
                continue
        else:
            names.append(unquote(entry))
    return sorted(names)


def detached_path(base_dir: Path) -> Path:
    """A new name, in ``base_dir``, to rename a deleted managed ledger's directory to."""
    return base_dir / f"{_DETACHED_MARK}{os.urandom(8).hex()}"


def leftover_detached(base_dir: Path) -> list[Path]:
    """The directories renamed aside whose removal a crash interrupted."""
    return [base_dir / e for e in os.listdir(base_dir) if e.startswith(_DETACHED_MARK)]
