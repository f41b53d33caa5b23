"""Build: the broker's hot-path modules compiled to C extensions with mypyc, where it can.

Everything else (name, dependencies, packages) is in pyproject.toml. The compiled modules are
the same ``.py`` files: an extension module is imported before its source. Where no C
compiler or no mypyc is available, or the build fails, the install goes on without them
and Starquake runs as pure Python. ``STARQUAKE_PURE=1`` at build time skips the compile; at run
time it makes Python import the sources instead (see ``starquake/_native.py``, which also
falls back to the sources when they changed after the build).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
SRC = ROOT / "src"

# Relative to src/. The publish path (frame decoding, SEND handling, the group commit, the
# segment writes, receipts) and what it calls per entry; and the Spark reads' walk over the
# messages of batches. Not (yet) the connection and the topic: mypyc's native classes take no
# weak references, and PersistentTopic is held in weak-keyed caches.
COMPILED = (
    "starquake/protocol/varint.py",
    "starquake/protocol/checksum.py",
    "starquake/protocol/framing.py",
    "starquake/protocol/commands.py",
    "starquake/protocol/send_scan.py",
    "starquake/broker/command_checks.py",
    "starquake/broker/entry_info.py",
    "starquake/broker/entry_scan.py",
    "starquake/broker/producer.py",
    "starquake/broker/producer_commands.py",
    "starquake/broker/receipts.py",
    "starquake/broker/committer.py",
    "starquake/storage/commit.py",
    "starquake/storage/segment.py",
    "starquake/spark/_smm_walk.py",
)
MANIFEST = "_native.json"
"""Written beside the package's ``__init__.py``: the compiled modules and their sources'
digests, read at import to decide between the extensions and the sources."""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _module_name(relative: str) -> str:
    return relative.removesuffix(".py").replace("/", ".")


def _extensions() -> list[Any]:
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("starquake: mypyc is not available, building pure Python", file=sys.stderr)
        return []
    try:
        return list(
            mypycify(
                ["--config-file", "build-mypyc.ini", *(f"src/{rel}" for rel in COMPILED)],
                opt_level="3",
                group_name="starquake_native",
            )
        )
    except Exception as exc:  # mypy errors, missing compiler headers
        print(f"starquake: mypyc failed ({exc}), building pure Python", file=sys.stderr)
        return []


def _remove_unlisted(package_dir: Path) -> None:
    """Delete extension modules an earlier build left for modules no longer compiled (an
    editable install builds in the source tree): Python would import them before the
    sources."""
    listed = {Path(rel).relative_to("starquake").with_suffix("") for rel in COMPILED}
    for extension in package_dir.rglob("*.so"):
        module = extension.relative_to(package_dir).with_name(extension.name.split(".")[0])
        if module not in listed:
            print(f"starquake: removing {extension} (no longer compiled)", file=sys.stderr)
            extension.unlink()


PLACEHOLDER = Extension("starquake._compiled_modules", sources=[])
"""The extensions setup() is given: mypyc (a type check of the modules, then their C) runs only
where something is built, not in the build backend's steps that only write metadata (each a
process of its own, which would run it again)."""
METADATA_ONLY = frozenset({"egg_info", "dist_info", "sdist"})


class OptionalBuildExt(build_ext):
    """build_ext that compiles with mypyc, leaves a pure-Python install when compiling fails,
    and writes the manifest of what it compiled."""

    def finalize_options(self) -> None:
        dist = self.distribution
        if dist.ext_modules == [PLACEHOLDER] and not set(dist.commands) <= METADATA_ONLY:
            dist.ext_modules = _extensions()
        super().finalize_options()

    def run(self) -> None:
        if not self.extensions:
            return
        try:
            super().run()
        except Exception as exc:  # no compiler, no Python headers
            print(f"starquake: compiling failed ({exc}), pure Python", file=sys.stderr)
            for output in self.get_outputs():
                Path(output).unlink(missing_ok=True)
            return
        package_dir = self._package_dir()
        _remove_unlisted(package_dir)
        manifest = {_module_name(rel): _digest(SRC / rel) for rel in COMPILED}
        (package_dir / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))

    def _package_dir(self) -> Path:
        """Where the built ``starquake`` package is (the source tree, for an editable install)."""
        return Path(self.get_ext_fullpath("starquake.protocol.varint")).parent.parent

    def get_outputs(self) -> list[str]:
        outputs: list[str] = super().get_outputs()
        if self.extensions:
            outputs.append(str(self._package_dir() / MANIFEST))
        return outputs


if __name__ == "__main__":  # as setuptools' build backend runs it
    pure = os.environ.get("STARQUAKE_PURE") == "1"
    if pure:
        print("starquake: STARQUAKE_PURE=1, building pure Python", file=sys.stderr)
    setup(ext_modules=[] if pure else [PLACEHOLDER], cmdclass={"build_ext": OptionalBuildExt})
