"""Lifecycle parity with the official client, each scenario in a child process with a deadline
(a hang fails the test instead of blocking the run): receive with a zero receiver queue, SIGINT
during a blocking receive, errors after close and shutdown, exiting without close."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import types
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest
from admin_http import admin_json

import starquake.client
from starquake.broker.embedded import EmbeddedBroker

CHILD = Path(__file__).with_name("parity_child.py")
DEADLINE = 60.0


def _name(mod: types.ModuleType) -> str:
    return "official" if mod is pulsar else "starquake"


def _topic() -> str:
    return f"persistent://public/default/life-{uuid.uuid4().hex[:12]}"


def _start(scenario: str, mod: types.ModuleType, url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), scenario, _name(mod), url, _topic()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the child prints READY before it blocks
    assert line.strip() == "READY", (line, proc.stderr.read() if proc.stderr else "")


def _finish(proc: subprocess.Popen[str], deadline: float = DEADLINE) -> tuple[Any, str]:
    """The child's RESULT and stderr; fails if it does not exit cleanly within ``deadline``."""
    try:
        out, err = proc.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"child hung for {deadline}s:\n{out}\n{err}")
    assert proc.returncode == 0, (out, err)
    results = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert results, (out, err)
    return json.loads(results[-1][len("RESULT ") :]), err


def _run(scenario: str, mod: types.ModuleType, url: str) -> tuple[Any, str]:
    return _finish(_start(scenario, mod, url))


def test_zero_queue_receive_fetches_one_message_per_receive(
    mod: types.ModuleType, broker: EmbeddedBroker
) -> None:
    result, _ = _run("zero_queue", mod, broker.service_url)
    assert result == {
        "blocking": ["m0", "m1"],
        # the official client refuses a receive timeout without a receiver queue
        "timeout": "InvalidConfiguration",
        "late": "late",  # published while receive() waited
        "asyncio": ["m0", "m1", "m2", "m3"],
    }


@pytest.mark.parametrize("call", ["receive", "read_next"])
def test_sigint_interrupts_a_blocking_call(
    mod: types.ModuleType, broker: EmbeddedBroker, call: str
) -> None:
    proc = _start(f"{call}_sigint", mod, broker.service_url)
    _wait_ready(proc)  # READY once it waits inside the call
    proc.send_signal(signal.SIGINT)
    result, _ = _finish(proc, deadline=30)
    assert result == "Interrupted:pulsar"  # pulsar.Interrupted, a PulsarException


def test_errors_after_shutdown_and_close(mod: types.ModuleType, broker: EmbeddedBroker) -> None:
    result, err = _run("after_shutdown", mod, broker.service_url)
    closed = "AlreadyClosed"
    assert result == {
        "send": closed,
        "create_producer": closed,
        "subscribe": closed,
        "close_after_shutdown": "ok",
        "producer_close_twice": closed,
        "send_closed": closed,
        "create_producer_closed": closed,
        "client_close_twice": closed,
        "async_close_twice": str(pulsar.Result.AlreadyClosed),
        "async_send_closed": str(pulsar.Result.AlreadyClosed),
        "async_send_shutdown": str(pulsar.Result.AlreadyClosed),
        "async_create_shutdown": str(pulsar.Result.AlreadyClosed),
    }
    assert "never awaited" not in err


def test_exit_without_close_leaves_no_thread_behind(
    mod: types.ModuleType, broker: EmbeddedBroker
) -> None:
    started = time.monotonic()
    result, _ = _run("no_close", mod, broker.service_url)
    assert result == []  # no non-daemon thread the interpreter would wait for
    assert time.monotonic() - started < 30


def test_close_while_reconnecting_leaves_no_pending_task(
    mod: types.ModuleType, tmp_path: Path
) -> None:
    broker = EmbeddedBroker(tmp_path / "data").start()
    try:
        proc = _start("close_reconnecting", mod, broker.service_url)
        _wait_ready(proc)
        port = broker.broker_port
    finally:
        broker.stop()
    # a listener that never answers: reconnection attempts hang in the handshake
    with socket.socket() as silent:
        silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        silent.bind(("127.0.0.1", port))
        silent.listen(16)
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        result, err = _finish(proc)
    assert result == "closed"
    assert "Task was destroyed but it is pending" not in err


@pytest.mark.parametrize("scenario", ["background_close", "background_shutdown"])
def test_close_or_shutdown_stops_periodic_work(
    mod: types.ModuleType, broker: EmbeddedBroker, scenario: str
) -> None:
    """Partition watchers and pattern discovery end with the client: nothing is left pending
    when the interpreter exits."""
    topic = f"persistent://public/default/bg-{uuid.uuid4().hex[:12]}"
    status, _ = admin_json(
        broker, "PUT", topic.replace("persistent://", "/admin/v2/persistent/") + "/partitions", 2
    )
    assert status == 204
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), scenario, _name(mod), broker.service_url, topic],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    result, err = _finish(proc)
    assert result == scenario.removeprefix("background_")
    assert "Task was destroyed but it is pending" not in err
    assert "never awaited" not in err


def test_sigint_interrupts_batch_receive(broker: EmbeddedBroker) -> None:
    """Ours raises Interrupted here too. (The official client does not see the signal while
    it waits in batch_receive: it returns only when the batch policy lets it.)"""
    proc = _start("batch_receive_sigint", starquake.client, broker.service_url)
    _wait_ready(proc)  # READY once it waits inside the call
    proc.send_signal(signal.SIGINT)
    result, _ = _finish(proc, deadline=30)
    assert result == "Interrupted:pulsar"
