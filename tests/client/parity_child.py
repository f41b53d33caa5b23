"""Child process of the lifecycle parity tests: one scenario with one client, results on stdout.

Usage: ``python parity_child.py SCENARIO MODULE SERVICE_URL TOPIC`` where MODULE is ``official``
(``pulsar``) or ``starquake`` (``starquake.client``). Each scenario prints ``READY`` once it
blocks (if it does) and a last line ``RESULT <json>``. Run in a subprocess so that a hang
fails the test at its deadline instead of blocking the run.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import signal
import sys
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _modules(name: str) -> tuple[types.ModuleType, types.ModuleType]:
    """The blocking and asyncio modules of client ``name``."""
    if name == "official":
        import pulsar
        import pulsar.asyncio

        return pulsar, pulsar.asyncio
    import starquake.client
    import starquake.client.asyncio

    return starquake.client, starquake.client.asyncio


def _client(mod: types.ModuleType, url: str) -> Any:
    return mod.Client(
        url, operation_timeout_seconds=5, logger=mod.ConsoleLogger(mod.LoggerLevel.Error)
    )


def _error_name(exc: BaseException) -> str:
    return type(exc).__name__


def zero_queue(mod: types.ModuleType, amod: types.ModuleType, url: str, topic: str) -> Any:
    """receiver_queue_size=0: blocking receive, receive with a timeout, asyncio receive."""
    client = _client(mod, url)
    consumer = client.subscribe(topic, "zq", receiver_queue_size=0)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(4):
        producer.send(f"m{i}".encode())
    got = [consumer.receive().data().decode() for _ in range(2)]
    try:
        consumer.receive(timeout_millis=500)
        timed = "ok"
    except mod.PulsarException as exc:
        timed = _error_name(exc)
    for _ in range(2):
        consumer.acknowledge_cumulative(consumer.receive())
    # a receive that waits before the message is published: its FLOW(1) brings the message
    late = threading.Timer(0.5, lambda: producer.send(b"late"))
    late.start()
    waited = consumer.receive().data().decode()
    late.join()
    consumer.close()

    async def run_async() -> list[str]:
        aclient = amod.Client(url, operation_timeout_seconds=5)
        aconsumer = await aclient.subscribe(
            topic, "azq", receiver_queue_size=0, initial_position=mod.InitialPosition.Earliest
        )
        out = [(await aconsumer.receive()).data().decode() for _ in range(4)]
        await aconsumer.close()
        await aclient.close()
        return out

    out = {"blocking": got, "timeout": timed, "late": waited, "asyncio": asyncio.run(run_async())}
    client.close()
    return out


def _announce_when_blocked() -> None:
    """Print ``READY`` once the main thread waits in the blocking call (see ``when_blocked``)."""
    when_blocked(lambda: print("READY", flush=True))


def when_blocked(action: Callable[[], object]) -> None:
    """Run ``action`` on a watcher thread once the main thread has stayed inside the client
    library at the same spot for 0.1 s: it is then waiting in the blocking call, so a SIGINT
    lands inside it. (Frames of the child scripts do not count as the library.)"""
    main = threading.main_thread().ident
    assert main is not None

    def where() -> tuple[object, int] | None:
        frame = sys._current_frames().get(main)
        if frame is None or Path(frame.f_code.co_filename).parent == Path(__file__).parent:
            return None
        return frame.f_code, frame.f_lineno

    def watch() -> None:
        seen, since = None, time.monotonic()
        while True:
            spot = where()
            if spot is None or spot != seen:
                seen, since = spot, time.monotonic()
            elif time.monotonic() - since >= 0.1:
                action()
                return
            time.sleep(0.01)

    threading.Thread(target=watch, daemon=True).start()


def _blocked_until_sigint(mod: types.ModuleType, url: str, topic: str, call: str) -> Any:
    """Block in ``call`` (receive, batch_receive or read_next) until the parent sends SIGINT:
    the exception raised."""
    client = _client(mod, url)
    if call == "read_next":
        handle = client.create_reader(topic, mod.MessageId.latest)
    else:
        policy = mod.ConsumerBatchReceivePolicy(10, -1, -1)  # waits for 10 messages, no timeout
        handle = client.subscribe(topic, "int", batch_receive_policy=policy)
    _announce_when_blocked()
    try:
        getattr(handle, call)()
        result = "received"
    except BaseException as exc:
        result = _error_name(exc)
        is_pulsar = isinstance(exc, mod.PulsarException)
        result = f"{result}:{'pulsar' if is_pulsar else 'other'}"
    client.close()
    return result


def receive_sigint(mod: types.ModuleType, amod: types.ModuleType, url: str, topic: str) -> Any:
    return _blocked_until_sigint(mod, url, topic, "receive")


def batch_receive_sigint(
    mod: types.ModuleType, amod: types.ModuleType, url: str, topic: str
) -> Any:
    return _blocked_until_sigint(mod, url, topic, "batch_receive")


def read_next_sigint(mod: types.ModuleType, amod: types.ModuleType, url: str, topic: str) -> Any:
    return _blocked_until_sigint(mod, url, topic, "read_next")


def no_close(mod: types.ModuleType, amod: types.ModuleType, url: str, topic: str) -> Any:
    """Create a client, a producer and a consumer, send, receive, and exit without closing
    anything: the threads still running that the interpreter would wait for."""
    client = _client(mod, url)
    consumer = client.subscribe(topic, "nc")
    producer = client.create_producer(topic)
    producer.send(b"x")
    consumer.receive()
    main = threading.main_thread()
    return [t.name for t in threading.enumerate() if not t.daemon and t is not main]


def after_shutdown(mod: types.ModuleType, amod: types.ModuleType, url: str, topic: str) -> Any:
    """What sends, creations and closes raise after Client.shutdown(), blocking and asyncio."""
    out: dict[str, str] = {}

    def attempt(label: str, call: Any) -> None:
        try:
            call()
            out[label] = "ok"
        except Exception as exc:
            out[label] = _error_name(exc)

    client = _client(mod, url)
    producer = client.create_producer(topic)
    client.shutdown()
    attempt("send", lambda: producer.send(b"x"))
    attempt("create_producer", lambda: client.create_producer(topic))
    attempt("subscribe", lambda: client.subscribe(topic, "s"))
    attempt("close_after_shutdown", client.close)
    other = _client(mod, url)
    closed = other.create_producer(topic)
    closed.close()
    attempt("producer_close_twice", closed.close)
    attempt("send_closed", lambda: closed.send(b"x"))
    other.close()
    attempt("create_producer_closed", lambda: other.create_producer(topic))
    attempt("client_close_twice", other.close)

    async def run_async() -> None:
        async def attempt_async(label: str, call: Any) -> None:
            try:
                await asyncio.wait_for(call(), 10)
                out[label] = "ok"
            except amod.PulsarException as exc:
                out[label] = str(exc.error())
            except Exception as exc:
                out[label] = _error_name(exc)

        aclient = amod.Client(url, operation_timeout_seconds=5)
        aproducer = await aclient.create_producer(topic)
        await aproducer.close()
        await attempt_async("async_close_twice", aproducer.close)
        await attempt_async("async_send_closed", lambda: aproducer.send(b"x"))
        other = await aclient.create_producer(topic)
        aclient.shutdown()
        await attempt_async("async_send_shutdown", lambda: other.send(b"x"))
        await attempt_async("async_create_shutdown", lambda: aclient.create_producer(topic))

    asyncio.run(run_async())
    return out


def close_reconnecting(mod: types.ModuleType, amod: types.ModuleType, url: str, topic: str) -> Any:
    """Close the client while its producer reconnects (the parent stopped the broker after
    READY and answers on stdin); the collector then destroys every leftover task."""
    client = _client(mod, url)
    producer = client.create_producer(topic)
    producer.send(b"x")
    print("READY", flush=True)
    sys.stdin.readline()
    time.sleep(1.0)  # the connection is gone: reconnection attempts run
    client.close()
    del producer, client
    gc.collect()
    return "closed"


def _background_work(mod: types.ModuleType, url: str, topic: str) -> Any:
    """A client with periodic work running: partition watchers (``topic`` is partitioned)
    for a producer and a consumer, and the discovery of a pattern subscription."""
    client = _client(mod, url)
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "bg")
    prefix = topic.rsplit("/", 1)[0]
    pattern = client.subscribe(re.compile(prefix + "/bg-.*"), "bg-pattern")
    producer.send(b"x")
    consumer.receive(5000)
    return client, [producer, consumer, pattern]


def _end_with_background_work(mod: types.ModuleType, url: str, topic: str, end: str) -> Any:
    """Close or shut down the client (not its producers and consumers) while periodic work
    runs; the collector then destroys every leftover task."""
    client, handles = _background_work(mod, url, topic)
    getattr(client, end)()
    del handles, client
    gc.collect()
    return end


def background_close(mod: types.ModuleType, amod: types.ModuleType, url: str, topic: str) -> Any:
    return _end_with_background_work(mod, url, topic, "close")


def background_shutdown(mod: types.ModuleType, amod: types.ModuleType, url: str, topic: str) -> Any:
    return _end_with_background_work(mod, url, topic, "shutdown")


SCENARIOS = {
    "background_close": background_close,
    "background_shutdown": background_shutdown,
    "close_reconnecting": close_reconnecting,
    "zero_queue": zero_queue,
    "receive_sigint": receive_sigint,
    "batch_receive_sigint": batch_receive_sigint,
    "read_next_sigint": read_next_sigint,
    "no_close": no_close,
    "after_shutdown": after_shutdown,
}


def main() -> None:
    # Python leaves SIGINT ignored when its parent ignored it (a background job of a
    # non-interactive shell, some CI runners); a program in a terminal has Ctrl-C raise
    # KeyboardInterrupt, which the SIGINT scenarios are about
    signal.signal(signal.SIGINT, signal.default_int_handler)
    scenario, name, url, topic = sys.argv[1:5]
    mod, amod = _modules(name)
    result = SCENARIOS[scenario](mod, amod, url, topic)
    print("RESULT " + json.dumps(result), flush=True)
    if name == "official" and scenario != "no_close":
        # the official client 3.13 now and then crashes (SIGSEGV) in its C++ teardown at
        # interpreter exit, after the scenario is over; only no_close is about exiting
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
