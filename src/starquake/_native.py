"""Whether this process runs the compiled hot-path modules or their Python sources.

An install compiles some modules with mypyc where it can (setup.py) and lists them, with
digests of the sources they were built from, in ``_native.json`` beside this file. Python
imports an extension module before a source of the same name, so the sources are used
instead (by a finder placed first on ``sys.meta_path``) when ``STARQUAKE_PURE=1`` is set, or
when any listed source changed after the build (an editable install being worked on: the
extensions would run old code). All or nothing: the compiled modules call each other directly.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["BUILD", "choose_build"]

_PACKAGE = Path(__file__).resolve().parent
_MANIFEST = _PACKAGE / "_native.json"

BUILD = "pure Python"
"""What this process runs: "compiled", or "pure Python" (with the reason, when there is a
compiled build it does not use)."""


def _source_of(module: str) -> Path:
    """The ``.py`` file of ``module`` (``starquake.x.y``) in this package."""
    return _PACKAGE / (module.split(".", 1)[1].replace(".", "/") + ".py")


class _SourceFinder(importlib.machinery.PathFinder):
    """Finds the listed modules' ``.py`` sources, ignoring their extension modules."""

    def __init__(self, modules: set[str]) -> None:
        self._modules = modules

    def find_spec(  # type: ignore[override]
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._modules:
            return None
        source = _source_of(fullname)
        loader = importlib.machinery.SourceFileLoader(fullname, str(source))
        return importlib.util.spec_from_file_location(fullname, source, loader=loader)


def _stale(manifest: dict[str, str]) -> list[str]:
    stale = []
    for module, digest in manifest.items():
        source = _source_of(module)
        try:
            if hashlib.sha256(source.read_bytes()).hexdigest() != digest:
                stale.append(module)
        except OSError:
            stale.append(module)
    return stale


def choose_build() -> str:
    """Decide once, before any listed module is imported; returns :data:`BUILD`."""
    global BUILD
    try:
        manifest: dict[str, str] = json.loads(_MANIFEST.read_text())
    except (OSError, ValueError):
        return BUILD  # no compiled build
    if os.environ.get("STARQUAKE_PURE") == "1":
        reason = "STARQUAKE_PURE=1"
    else:
        stale = _stale(manifest)
        if not stale:
            BUILD = "compiled"
            return BUILD
        reason = f"{stale[0]} changed since the build; reinstall to compile it"
    sys.meta_path.insert(0, _SourceFinder(set(manifest)))
    BUILD = f"pure Python ({reason})"
    return BUILD
