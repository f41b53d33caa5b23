"""The compiled build and its pure-Python fallback: which one a process runs, and an install
without a C compiler."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from starquake import _native

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "starquake"


def _probe(env: dict[str, str]) -> dict[str, str]:
    """In a fresh interpreter: the build chosen and where two hot-path modules came from."""
    code = (
        "import json, starquake._native as n, starquake.protocol.framing as f, "
        "starquake.broker.producer_commands as p; "
        "print(json.dumps({'build': n.BUILD, 'framing': f.__file__, 'producer': p.__file__}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, str] = json.loads(out.stdout)
    return result


def test_starquake_pure_imports_the_sources() -> None:
    probe = _probe({**os.environ, "STARQUAKE_PURE": "1"})
    assert probe["framing"].endswith("framing.py")
    assert probe["producer"].endswith("producer_commands.py")
    assert probe["build"].startswith("pure Python")


@pytest.mark.skipif(
    not (PACKAGE / "_native.json").exists(), reason="this install has no compiled build"
)
def test_compiled_build_imports_the_extensions() -> None:
    env = {k: v for k, v in os.environ.items() if k != "STARQUAKE_PURE"}
    probe = _probe(env)
    assert probe["build"] == "compiled", probe["build"]
    assert probe["framing"].endswith(".so")
    assert probe["producer"].endswith(".so")


@pytest.mark.skipif(
    not (PACKAGE / "_native.json").exists(), reason="this install has no compiled build"
)
def test_each_compiled_module_imports_first() -> None:
    """A compiled module may refer to another's compiled class at import (a NamedTuple's
    annotations do): imported first in a fresh interpreter, each still loads (the broker's own
    import order hid a crash of starquake.broker.receipts imported alone)."""
    modules = sorted(json.loads((PACKAGE / "_native.json").read_text()))
    env = {k: v for k, v in os.environ.items() if k != "STARQUAKE_PURE"}
    code = "import importlib, sys; m = importlib.import_module(sys.argv[1]); print(m.__file__)"
    for module in modules:
        run = subprocess.run(
            [sys.executable, "-c", code, module], env=env, capture_output=True, text=True
        )
        assert run.returncode == 0, (module, run.returncode, run.stderr[-2000:])
        assert run.stdout.strip().endswith(".so"), (module, run.stdout)


def test_a_source_changed_after_the_build_is_stale() -> None:
    source = PACKAGE / "protocol" / "varint.py"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    assert _native._stale({"starquake.protocol.varint": digest}) == []
    assert _native._stale({"starquake.protocol.varint": "0" * 64}) == ["starquake.protocol.varint"]
    assert _native._stale({"starquake.protocol.gone": digest}) == ["starquake.protocol.gone"]


BUILD_SCRIPT = """
import runpy, sys
from setuptools import Extension, setup
build = runpy.run_path(sys.argv.pop(1), run_name="starquake_setup")
setup(
    name="probe",
    ext_modules=[Extension("starquake.protocol.varint", ["varint.c"])],
    cmdclass={"build_ext": build["OptionalBuildExt"]},
)
"""


def test_without_a_c_compiler_the_install_is_pure_python(tmp_path: Path) -> None:
    """``CC=false``: compiling fails; the build still succeeds and leaves no extension and
    no manifest, so the package runs its sources."""
    (tmp_path / "varint.c").write_text("#include <Python.h>\n")
    (tmp_path / "starquake" / "protocol").mkdir(parents=True)
    (tmp_path / "build_probe.py").write_text(BUILD_SCRIPT)
    env = {**os.environ, "CC": "false", "LDSHARED": "false"}
    run = subprocess.run(
        [sys.executable, "build_probe.py", str(ROOT / "setup.py"), "build_ext", "--inplace"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "compiling failed" in run.stderr
    built = [p.name for p in tmp_path.rglob("*") if p.suffix == ".so" or p.suffix == ".json"]
    assert built == []
