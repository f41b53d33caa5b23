"""A storm of wrong credentials (thousands of CONNECTs, bounded concurrency) leaves the broker
serving its authenticated clients: their produce/consume work completes promptly, a new good
client connects during the storm, and the broker stays healthy afterwards.

``bench/auth_storm.py`` measures the same with throughput ratios."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from auth_support import (
    BASIC_PROVIDER,
    HASHES,
    TOKEN_PROVIDER,
    data_url,
    hs256,
    htpasswd,
    secret_key,
    storm_attempt,
)

from starquake.broker.embedded import EmbeddedBroker
from starquake.protocol._generated import starquake_wire_pb2 as pb

KEY = secret_key()
STORM_ATTEMPTS = 3000
CONCURRENCY = 50
MAX_ROUND_TRIP = 3.0
"""Seconds one produce+consume round trip of the good client may take during a storm (a
generous bound for a busy, shared machine; it takes milliseconds)."""


@pytest.fixture(scope="module")
def storm_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    directory = tmp_path_factory.mktemp("storm")
    conf = htpasswd(directory / "htpasswd", {"user": HASHES["bcrypt"]("right")})
    with EmbeddedBroker(
        directory / "data",
        authenticationEnabled=True,
        authenticationProviders=f"{TOKEN_PROVIDER},{BASIC_PROVIDER}",
        tokenSecretKey=data_url(KEY),
        basicAuthConf=str(conf),
    ) as running:
        yield running


class GoodClient(threading.Thread):
    """Produces and consumes one message at a time until stopped, timing each round trip."""

    def __init__(self, url: str) -> None:
        super().__init__(name="good-client", daemon=True)
        self.client = pulsar.Client(
            url,
            authentication=pulsar.AuthenticationToken(hs256(KEY, "good")),
            operation_timeout_seconds=30,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        topic = f"persistent://public/default/storm-{uuid.uuid4().hex[:8]}"
        self.consumer = self.client.subscribe(topic, "sub")
        self.producer = self.client.create_producer(topic)
        self.stopping = threading.Event()
        self.round_trips: list[float] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            n = 0
            while not self.stopping.is_set():
                started = time.monotonic()
                payload = f"m{n}".encode()
                self.producer.send(payload)
                msg = self.consumer.receive(timeout_millis=30000)
                assert msg.data() == payload
                self.consumer.acknowledge(msg)
                self.round_trips.append(time.monotonic() - started)
                n += 1
        except BaseException as exc:
            self.error = exc

    def finish(self) -> None:
        self.stopping.set()
        self.join(timeout=60)
        self.client.close()
        assert self.error is None, self.error


async def _storm(port: int, credentials: list[tuple[str, bytes]]) -> list[int]:
    slots = asyncio.Semaphore(CONCURRENCY)

    async def one(method: str, data: bytes) -> int:
        async with slots:
            return await storm_attempt(port, method, data)

    return await asyncio.gather(*(one(m, d) for m, d in credentials))


def _good_connect_seconds(url: str) -> float:
    started = time.monotonic()
    client = pulsar.Client(
        url,
        authentication=pulsar.AuthenticationToken(hs256(KEY, "late")),
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        client.create_producer(f"late-{uuid.uuid4().hex[:8]}").send(b"x")
    finally:
        client.close()
    return time.monotonic() - started


def _run_storm(broker: EmbeddedBroker, credentials: list[tuple[str, bytes]]) -> dict[str, Any]:
    good = GoodClient(broker.service_url)
    good.start()
    late: list[float] = []
    late_thread = threading.Thread(
        target=lambda: (time.sleep(0.3), late.append(_good_connect_seconds(broker.service_url)))
    )
    late_thread.start()
    started = time.monotonic()
    codes = asyncio.run(_storm(broker.broker_port, credentials))
    storm_seconds = time.monotonic() - started
    late_thread.join(timeout=60)
    good.finish()
    return {"codes": codes, "seconds": storm_seconds, "good": good.round_trips, "late": late}


def test_wrong_token_storm(storm_broker: EmbeddedBroker) -> None:
    failures_before = storm_broker.service.authentication.failures
    wrong_key = secret_key()
    credentials = [
        ("token", hs256(wrong_key, f"attacker-{i}").encode() if i % 2 else os.urandom(40))
        for i in range(STORM_ATTEMPTS)
    ]
    result = _run_storm(storm_broker, credentials)
    assert result["codes"] == [pb.AuthenticationError] * STORM_ATTEMPTS
    assert result["good"], "the good client completed no round trip during the storm"
    assert max(result["good"]) < MAX_ROUND_TRIP, max(result["good"])
    assert result["late"] and result["late"][0] < 10
    failures = storm_broker.service.authentication.failures
    assert failures - failures_before >= STORM_ATTEMPTS
    _assert_healthy(storm_broker)


def test_wrong_password_storm(storm_broker: EmbeddedBroker) -> None:
    """bcrypt checks are slow: they run on one worker thread, a bounded number wait, and the
    rest are refused at once; other clients do not notice."""
    credentials = [("basic", f"user:wrong-{i}".encode()) for i in range(600)]
    result = _run_storm(storm_broker, credentials)
    assert result["codes"] == [pb.AuthenticationError] * len(credentials)
    assert max(result["good"]) < MAX_ROUND_TRIP, max(result["good"])
    assert result["seconds"] < 60
    # the right password still works once the storm is over
    codes = asyncio.run(_storm(storm_broker.broker_port, [("basic", b"user:right")]))
    assert codes == [-1]
    _assert_healthy(storm_broker)


def _assert_healthy(broker: EmbeddedBroker) -> None:
    request = urllib.request.Request(
        f"{broker.web_service_url}/admin/v2/brokers/health",
        headers={"Authorization": f"Bearer {hs256(KEY, 'ops')}"},
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status == 200
    assert _good_connect_seconds(broker.service_url) < 5


def test_storm_helpers_see_success(storm_broker: EmbeddedBroker) -> None:
    """The storm's probe tells a CONNECTED from an ERROR (so the assertions above mean it)."""
    codes = asyncio.run(_storm(storm_broker.broker_port, [("token", hs256(KEY, "ok").encode())]))
    assert codes == [-1]
