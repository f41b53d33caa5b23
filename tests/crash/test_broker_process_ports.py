"""The broker-process fixture under port races: a port chosen free can be taken by another
program before the broker binds it, and a connection to it then reaches that program."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from broker_process import BrokerProcess, listening_ports, process_client


def _hold(port: int) -> socket.socket:
    """Listen on ``port`` the way another program would."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_listening_ports_names_only_the_process_own_ports() -> None:
    with socket.socket() as mine:
        mine.bind(("127.0.0.1", 0))
        mine.listen()
        port = mine.getsockname()[1]
        held = listening_ports(os.getpid())
        assert held is not None and port in held
    held = listening_ports(os.getpid())
    assert held is not None and port not in held


def test_a_port_taken_before_the_first_start_moves_the_broker_to_new_ports(
    tmp_path: Path,
) -> None:
    proc = BrokerProcess(tmp_path / "data")
    taken = proc.port
    with _hold(taken):
        proc.start()
        try:
            assert proc.port != taken
            client = process_client(proc.url)
            try:
                producer = client.create_producer("persistent://public/default/moved")
                assert producer.send(b"x").entry_id() == 0
            finally:
                client.close()
        finally:
            proc.cleanup()
    assert "address already in use" in proc.log()


def test_a_port_taken_before_a_restart_is_an_error_not_another_program(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    port = proc.port
    proc.stop()
    with _hold(port), pytest.raises(RuntimeError, match="exited during start-up"):
        proc.start()
    assert proc.port == port  # clients of the first start still hold this one
    proc.cleanup()
