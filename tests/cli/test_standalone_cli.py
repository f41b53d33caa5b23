"""``starquake standalone`` as a user runs it: flags, config file, signals."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pulsar
from broker_process import free_port, wait_listening


def _standalone_exits(cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Run ``starquake standalone`` with ``args`` to its exit (it must fail to start)."""
    return subprocess.run(
        [sys.executable, "-m", "starquake.cli.main", "standalone", *args],
        capture_output=True,
        cwd=cwd,
        timeout=30,
    )


def test_standalone_with_config_file_and_defines(tmp_path: Path) -> None:
    port, web = free_port(), free_port()
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"brokerServicePort={port}\nwebServicePort=1\nclusterName=standalone\n"
        "zookeeperServers=localhost:2181\nbookkeeperClientTimeoutInSeconds=30\n"
    )
    cmd = [
        sys.executable,
        "-m",
        "starquake.cli.main",
        "standalone",
        "--config",
        str(conf),
        "--data-dir",
        str(tmp_path / "data"),
        "-D",
        f"webServicePort={web}",
        "--bind-address",
        "127.0.0.1",
    ]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE)
    try:
        assert wait_listening(proc, [port, web], timeout=30), "the broker exited"
        with urllib.request.urlopen(f"http://127.0.0.1:{web}/admin/v2/brokers/health") as resp:
            assert resp.read() == b"ok"
        client = pulsar.Client(f"pulsar://127.0.0.1:{port}")
        producer = client.create_producer("cli-topic")
        assert producer.send(b"hi").entry_id() == 0
        client.close()
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    text = err.decode()
    assert "ready on" in text
    assert "stopped" in text
    # keys of a real Pulsar broker.conf that Starquake does not use are listed once
    ignored = [
        line for line in text.splitlines() if "configuration keys Starquake does not use" in line
    ]
    assert len(ignored) == 1
    assert ignored[0].endswith("bookkeeperClientTimeoutInSeconds, zookeeperServers")
    assert (tmp_path / "data" / "metadata.db").exists()


def test_bad_config_is_a_clear_error(tmp_path: Path) -> None:
    result = _standalone_exits(tmp_path, "-D", "nosuchkey=1")
    assert result.returncode == 2
    assert b"unknown configuration key 'nosuchkey'" in result.stderr


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = _standalone_exits(
            tmp_path,
            "--bind-address",
            "127.0.0.1",
            "--broker-port",
            str(port),
            "--web-port",
            "0",
            "--data-dir",
            str(tmp_path / "d"),
        )
    assert result.returncode == 1
    assert b"address already in use" in result.stderr


def test_out_of_range_port_fails_at_start_naming_the_key(tmp_path: Path) -> None:
    result = _standalone_exits(tmp_path, "--broker-port", "99999")
    assert result.returncode == 2
    expected = b"brokerServicePort: 99999 is out of range (it must be from -1 to 65535)"
    assert expected in result.stderr
    assert not (tmp_path / "data").exists()
