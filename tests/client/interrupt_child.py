"""Child process of the interrupt parity tests: a thread of this process raises SIGINT while the
main thread waits in one blocking call of one client; the result goes to stdout.

Usage: ``python interrupt_child.py CALL MODULE SERVICE_URL TOPIC`` (MODULE: ``official`` or
``starquake``). The last line is ``RESULT <json>``: what the call raised, whether the client
closed afterwards, and the seconds from the signal to the exception. A signal raised on another
thread is handled by the main thread only when that thread looks for it, so a client that
waits without looking hangs here (the parent's deadline then fails the test).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any

from parity_child import when_blocked

SIGNALLED: list[float] = []


def _module(name: str) -> types.ModuleType:
    if name == "official":
        import pulsar

        return pulsar
    import starquake.client

    return starquake.client


def _client(mod: types.ModuleType, url: str, timeout: int = 30) -> Any:
    return mod.Client(
        url, operation_timeout_seconds=timeout, logger=mod.ConsoleLogger(mod.LoggerLevel.Error)
    )


def _raise_sigint() -> None:
    """(On the watcher thread) SIGINT directed at this thread, not the main one."""
    SIGNALLED.append(time.monotonic())
    signal.raise_signal(signal.SIGINT)


def _silent_server() -> str:
    """A URL whose server accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            held.append(server.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    return f"pulsar://127.0.0.1:{server.getsockname()[1]}"


def _setup(call: str, mod: types.ModuleType, url: str, topic: str) -> tuple[Any, Callable[[], Any]]:
    """The client and the blocking call to interrupt."""
    if call == "create_producer":
        client = _client(mod, _silent_server(), timeout=120)
        return client, lambda: client.create_producer(topic)
    if call == "send":  # SERVICE_URL is a broker process; its pid is in BROKER_PID
        broker_pid = int(os.environ["BROKER_PID"])
        client = _client(mod, url)
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=0)
        producer.send(b"first")

        def send() -> Any:
            os.kill(broker_pid, signal.SIGSTOP)  # the receipt never comes while it is stopped
            try:
                return producer.send(b"held")
            finally:
                os.kill(broker_pid, signal.SIGCONT)

        return client, send
    client = _client(mod, url)
    if call == "read_next":
        return client, client.create_reader(topic, mod.MessageId.latest).read_next
    policy = mod.ConsumerBatchReceivePolicy(10, -1, -1)  # waits for 10 messages, no timeout
    consumer = client.subscribe(topic, "int", batch_receive_policy=policy)
    return client, getattr(consumer, call)


def main() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    call, name, url, topic = sys.argv[1:5]
    mod = _module(name)
    client, blocking = _setup(call, mod, url, topic)
    when_blocked(_raise_sigint)
    try:
        blocking()
        error = "returned"
    except BaseException as exc:
        kind = "pulsar" if isinstance(exc, mod.PulsarException) else "other"
        error = f"{type(exc).__name__}:{kind}"
    seconds = time.monotonic() - SIGNALLED[0] if SIGNALLED else None
    client.close()
    print("RESULT " + json.dumps({"error": error, "closed": True, "seconds": seconds}), flush=True)


if __name__ == "__main__":
    main()
