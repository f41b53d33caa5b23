"""SIGINT raised by another thread while the main thread waits in a blocking call, with both
clients (each run in a child process with a deadline, so that a hang fails the test): the call
raises ``Interrupted`` (a ``PulsarException``) and the client still closes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
import uuid
from pathlib import Path

import pulsar
import pytest
from broker_process import broker_process

from starquake.broker.embedded import EmbeddedBroker

CHILD = Path(__file__).with_name("interrupt_child.py")
DEADLINE = 60.0
# Generous against a loaded machine: without signal checks the call never returns at all.
BOUND_SECONDS = 10.0


def _run(
    call: str, mod: types.ModuleType, url: str, env: dict[str, str] | None = None
) -> dict[str, object]:
    name = "official" if mod is pulsar else "starquake"
    topic = f"persistent://public/default/intr-{uuid.uuid4().hex[:12]}"
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), call, name, url, topic],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=None if env is None else {**os.environ, **env},
    )
    try:
        out, err = proc.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{call}: the child hung for {DEADLINE}s:\n{out}\n{err}")
    assert proc.returncode == 0, (out, err)
    results = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert results, (out, err)
    result: dict[str, object] = json.loads(results[-1][len("RESULT ") :])
    return result


@pytest.mark.parametrize("call", ["receive", "read_next", "create_producer"])
def test_sigint_from_another_thread_interrupts_a_blocking_call(
    mod: types.ModuleType, broker: EmbeddedBroker, call: str
) -> None:
    result = _run(call, mod, broker.service_url)
    assert result["error"] == "Interrupted:pulsar", result
    assert result["closed"] is True
    seconds = result["seconds"]
    assert isinstance(seconds, float) and seconds < BOUND_SECONDS, result


def test_sigint_from_another_thread_interrupts_a_blocking_send(
    mod: types.ModuleType, tmp_path: Path
) -> None:
    """The broker process is stopped (SIGSTOP) while the send waits for its receipt."""
    with broker_process(tmp_path / "data") as broker:
        assert broker.proc is not None
        result = _run("send", mod, broker.url, {"BROKER_PID": str(broker.proc.pid)})
    assert result["error"] == "Interrupted:pulsar", result
    assert result["closed"] is True
    seconds = result["seconds"]
    assert isinstance(seconds, float) and seconds < BOUND_SECONDS, result


def test_sigint_from_another_thread_interrupts_batch_receive(broker: EmbeddedBroker) -> None:
    """Ours only: the official client does not look for signals in batch_receive."""
    import starquake.client

    result = _run("batch_receive", starquake.client, broker.service_url)
    assert result["error"] == "Interrupted:pulsar", result
    assert result["closed"] is True
