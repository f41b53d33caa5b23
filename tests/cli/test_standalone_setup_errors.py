"""``starquake standalone`` set-up mistakes: each refused with one line that names the setting
(and the close match, for a misspelling), and ``--help`` that documents the keys and levels."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def _standalone(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``starquake standalone ARGS`` to its exit (it must not start)."""
    return subprocess.run(
        [sys.executable, "-m", "starquake.cli.main", "standalone", *args],
        capture_output=True,
        cwd=cwd,
        timeout=60,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("starquake:")]


def test_help_describes_the_keys_and_log_levels(tmp_path: Path) -> None:
    result = _standalone(tmp_path, "--help")
    assert result.returncode == 0
    for text in ("brokerServicePort", "managedLedgerMaxEntriesPerLedger", "STARQUAKE_<key>"):
        assert text in result.stdout
    for level in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        assert level in result.stdout


@pytest.mark.parametrize(
    ("level", "hint"), [("LOUD", None), ("warnin", "WARNING"), ("DEBUGG", "DEBUG")]
)
def test_an_unknown_log_level_is_refused(tmp_path: Path, level: str, hint: str | None) -> None:
    result = _standalone(tmp_path, "--log-level", level, "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 2
    [line] = _error_lines(result)
    assert f"--log-level {level!r}" in line
    assert (f"did you mean {hint}?" in line) if hint else ("did you mean" not in line)
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    ("variable", "key"),
    [
        ("STARQUAKE_brokerServicePortt", "brokerServicePort"),
        ("STARQUAKE_WEBSERVICEPORT", "webServicePort"),
        ("STARQUAKE_dataDr", "dataDir"),
    ],
)
def test_a_misspelt_environment_variable_is_refused(
    tmp_path: Path, variable: str, key: str
) -> None:
    result = _standalone(tmp_path, "--data-dir", str(tmp_path / "d"), env={variable: "1"})
    assert result.returncode == 2
    [line] = _error_lines(result)
    assert variable in line and f"did you mean STARQUAKE_{key}?" in line


def test_a_misspelt_define_gets_the_close_match(tmp_path: Path) -> None:
    result = _standalone(tmp_path, "-D", "brokerServicePrt=1")
    assert result.returncode == 2
    [line] = _error_lines(result)
    assert "'brokerServicePrt'" in line and "did you mean brokerServicePort?" in line


@pytest.mark.parametrize(
    ("flag", "key"), [("--broker-port", "brokerServicePort"), ("--web-port", "webServicePort")]
)
def test_a_port_in_use_names_its_key(tmp_path: Path, flag: str, key: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        ports = {"--broker-port": "0", "--web-port": "0", flag: str(port)}
        args = [item for pair in ports.items() for item in pair]
        result = _standalone(
            tmp_path, "--bind-address", "127.0.0.1", "--data-dir", str(tmp_path / "d"), *args
        )
    assert result.returncode == 1
    [line] = _error_lines(result)
    assert f"{key} {port}" in line and "address already in use" in line


def test_a_data_directory_that_cannot_be_created_names_the_key(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = _standalone(
        tmp_path, "--broker-port", "0", "--web-port", "0", "--data-dir", str(blocker / "data")
    )
    assert result.returncode == 1
    [line] = _error_lines(result)
    assert f"dataDir {blocker / 'data'}" in line
