"""Secrets and data are not world-readable: ``starquake tokens`` writes key files 0600 even over
an existing file, and ``starquake standalone`` keeps its data directory to
``dataDirPermissions`` (700 by default) whatever the umask, without breaking a restart over a
data directory made before."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess, process_client, read_all


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, under which files are created world-readable unless told otherwise."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _tokens(*args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "starquake.cli.main", "tokens", *args],
        check=True,
        capture_output=True,
        timeout=60,
    )


def test_key_files_are_private_even_when_they_existed(tmp_path: Path, umask_022: None) -> None:
    secret = tmp_path / "secret.key"
    private = tmp_path / "private.key"
    public = tmp_path / "public.key"
    for path in (secret, private):
        path.write_bytes(b"old")
        path.chmod(0o644)
    _tokens("create-secret-key", "--output", str(secret))
    _tokens("create-secret-key", "--base64", "--output", str(tmp_path / "new-b64.key"))
    _tokens(
        "create-key-pair",
        "--output-private-key",
        str(private),
        "--output-public-key",
        str(public),
    )
    assert len(secret.read_bytes()) == 32
    assert _mode(secret) == 0o600
    assert _mode(tmp_path / "new-b64.key") == 0o600
    assert _mode(private) == 0o600
    assert _mode(public) == 0o644  # a public key is no secret


def _produce(broker: BrokerProcess, topic: str, count: int) -> None:
    client = process_client(broker.url)
    try:
        producer = client.create_producer(topic)
        for i in range(count):
            producer.send(f"m{i}".encode())
        client.subscribe(topic, "keep")  # a cursor, so that cursor state is written too
    finally:
        client.close()


def _produce_once(data: Path, topic: str, count: int, *defines: str) -> None:
    """Start a broker over ``data``, produce ``count`` messages to ``topic``, stop it."""
    broker = BrokerProcess(data, *defines)
    broker.start()
    try:
        _produce(broker, topic, count)
        broker.stop()
    finally:
        broker.cleanup()


def _too_open(data: Path, allowed: int) -> list[str]:
    """Entries under ``data`` with permission bits beyond ``allowed`` (files: without x)."""
    found = []
    for root, dirs, files in os.walk(data):
        for name in dirs:
            path = Path(root, name)
            if _mode(path) & ~allowed:
                found.append(f"{path} {_mode(path):o}")
        for name in files:
            path = Path(root, name)
            if _mode(path) & ~allowed & 0o666:
                found.append(f"{path} {_mode(path):o}")
    return found


def test_data_directory_is_private_by_default(tmp_path: Path, umask_022: None) -> None:
    data = tmp_path / "data"
    _produce_once(data, f"perm-{uuid.uuid4().hex[:8]}", 5)
    assert _mode(data) == 0o700
    assert list(data.rglob("*")), "the broker wrote nothing"
    assert _too_open(data, 0o700) == []


def test_configured_permissions_and_restart_over_an_open_directory(
    tmp_path: Path, umask_022: None
) -> None:
    data = tmp_path / "data"
    topic = f"perm-{uuid.uuid4().hex[:8]}"
    # a data directory as an earlier version left it: 755, files 644
    _produce_once(data, topic, 3, "dataDirPermissions=755")
    assert _mode(data) == 0o755
    assert any(_mode(p) == 0o644 for p in data.rglob("*") if p.is_file())
    # the default narrows the directory itself; the data is all there after the restart
    broker = BrokerProcess(data, log_level="INFO")
    broker.start()
    try:
        assert _mode(data) == 0o700
        assert [payload for payload, _ in read_all(broker.url, topic)] == [b"m0", b"m1", b"m2"]
        assert "narrowed the permissions of data directory" in broker.log()
        broker.stop()
    finally:
        broker.cleanup()
    # a group-readable setting is honoured for a new directory and what is created in it
    shared = tmp_path / "shared"
    _produce_once(shared, topic, 1, "dataDirPermissions=0750")
    assert _mode(shared) == 0o750
    assert _too_open(shared, 0o750) == []


def test_bad_permissions_setting_is_refused(tmp_path: Path) -> None:
    for value in ("644", "rwx", "1777"):
        broker = BrokerProcess(tmp_path / f"d{value}", f"dataDirPermissions={value}")
        with pytest.raises(RuntimeError, match="dataDirPermissions"):
            broker.start()
