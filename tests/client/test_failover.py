"""``AutoClusterFailover`` between two broker processes: the client produces and consumes on
the primary, moves to the secondary once the primary is killed (kill -9), and back to the
primary once it runs again; its producer and consumer follow each switch. The same with
the official client and with ours."""

from __future__ import annotations

import asyncio
import threading
import types
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pulsar.asyncio
from broker_process import BrokerProcess, read_all
from polling import wait_for

import starquake.client
import starquake.client.asyncio
from starquake.broker.embedded import EmbeddedBroker


def _receive_until(consumer: Any, payload: bytes) -> list[bytes]:
    """Receive (and acknowledge) until ``payload`` arrives; redeliveries of earlier messages
    (acknowledgements a killed broker never stored) may come first."""
    seen = []
    while True:
        msg = consumer.receive(30_000)
        consumer.acknowledge(msg)
        seen.append(msg.data())
        if msg.data() == payload:
            return seen


def test_client_fails_over_to_the_secondary_and_switches_back(
    mod: types.ModuleType, tmp_path: Path
) -> None:
    primary = BrokerProcess(tmp_path / "primary")
    secondary = BrokerProcess(tmp_path / "secondary")
    primary.start()
    secondary.start()
    topic = f"persistent://public/default/failover-{uuid.uuid4().hex[:12]}"
    config = mod.AutoClusterFailover(
        mod.ServiceInfo(primary.url),
        [mod.ServiceInfo(secondary.url)],
        check_interval_ms=200,
        failover_threshold=2,
        switch_back_threshold=2,
    )
    client = mod.Client(
        config, operation_timeout_seconds=30, logger=mod.ConsoleLogger(mod.LoggerLevel.Error)
    )
    try:
        assert client.get_service_info().service_url == primary.url
        producer = client.create_producer(topic, batching_enabled=False)
        consumer = client.subscribe(topic, "sub", initial_position=mod.InitialPosition.Earliest)
        producer.send(b"on-primary")
        assert _receive_until(consumer, b"on-primary") == [b"on-primary"]

        primary.kill()
        wait_for(lambda: client.get_service_info().service_url == secondary.url, "failover")
        producer.send(b"on-secondary")
        assert _receive_until(consumer, b"on-secondary")[-1] == b"on-secondary"
        assert [data for data, _ in read_all(secondary.url, topic)] == [b"on-secondary"]

        primary.start()
        wait_for(lambda: client.get_service_info().service_url == primary.url, "switch back")
        producer.send(b"back-on-primary")
        assert _receive_until(consumer, b"back-on-primary")[-1] == b"back-on-primary"
        on_primary = [data for data, _ in read_all(primary.url, topic)]
        assert on_primary == [b"on-primary", b"back-on-primary"]
        client.close()
    finally:
        primary.cleanup()
        secondary.cleanup()


def test_asyncio_client_follows_a_provider_update(
    mod: types.ModuleType, broker: EmbeddedBroker
) -> None:
    """A provider starts the client on a dead address and reports the live broker: the
    asyncio client's next producer is created on the live broker. (The official client
    aborts the process when the update comes from a thread of the provider's own.)"""
    amod = pulsar.asyncio if mod is pulsar else starquake.client.asyncio
    topic = f"persistent://public/default/provider-{uuid.uuid4().hex[:12]}"

    class Provider(mod.ServiceInfoProvider):  # type: ignore[name-defined,misc]
        def initial_service_info(self) -> Any:
            return mod.ServiceInfo("pulsar://127.0.0.1:9")  # nothing listens there

        def initialize(self, on_update: Any) -> None:
            self.update = on_update

    async def scenario() -> bytes:
        provider = Provider()
        client = amod.Client(provider, operation_timeout_seconds=30)
        try:
            provider.update(mod.ServiceInfo(broker.service_url))
            producer = await client.create_producer(topic)
            await producer.send(b"via-provider")
            await producer.close()
        finally:
            await client.close()
        return b"via-provider"

    assert asyncio.run(scenario()) == b"via-provider"
    assert [data for data, _ in read_all(broker.service_url, topic)] == [b"via-provider"]


def test_update_from_a_provider_thread_redirects_lookups_in_progress(
    broker: EmbeddedBroker,
) -> None:
    """Ours only (see above): the update arrives from the provider's thread while the
    producer's first lookup retries against the dead address; its next attempt goes to the
    live broker instead of retrying there until the operation timeout."""
    topic = f"persistent://public/default/provider-{uuid.uuid4().hex[:12]}"
    sq = starquake.client

    class Provider(sq.ServiceInfoProvider):
        def initial_service_info(self) -> sq.ServiceInfo:
            return sq.ServiceInfo("pulsar://127.0.0.1:9")

        def initialize(self, on_update: Any) -> None:
            live = sq.ServiceInfo(broker.service_url)
            threading.Timer(0.5, on_update, args=(live,)).start()

    client = sq.Client(Provider(), operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic)
        producer.send(b"redirected")
        assert client.get_service_info().service_url == broker.service_url
    finally:
        client.close()
    assert [data for data, _ in read_all(broker.service_url, topic)] == [b"redirected"]


def test_acknowledgments_not_sent_before_a_switch_stay_with_the_old_cluster(
    tmp_path: Path,
) -> None:
    """Ours only (the official client aborts on an update from another thread): message ids
    of two clusters overlap (each one's first message is 0:0 here), so an acknowledgment
    grouped on the first cluster and sent after the switch would remove the second
    cluster's own first message from the subscription. It is dropped at the switch."""
    sq = starquake.client
    topic = f"persistent://public/default/switch-acks-{uuid.uuid4().hex[:12]}"
    with EmbeddedBroker(tmp_path / "first") as first, EmbeddedBroker(tmp_path / "second") as second:
        for broker, payload in ((first, b"on-first"), (second, b"on-second")):
            seed = sq.Client(broker.service_url)
            seed.subscribe(topic, "sub", initial_position=sq.InitialPosition.Earliest).close()
            seed.create_producer(topic).send(payload)
            seed.close()
        assert read_all(second.service_url, topic)[0] == (b"on-second", (0, 0))
        assert read_all(first.service_url, topic)[0][1] == (0, 0)

        class Provider(sq.ServiceInfoProvider):
            def initial_service_info(self) -> sq.ServiceInfo:
                return sq.ServiceInfo(first.service_url)

            def initialize(self, on_update: Any) -> None:
                self.update = on_update

        provider = Provider()
        client = sq.Client(provider, operation_timeout_seconds=30)
        try:
            consumer = client.subscribe(topic, "sub")
            msg = consumer.receive(10_000)
            assert msg.data() == b"on-first"
            consumer.acknowledge(msg)  # grouped: not on the wire yet
            provider.update(sq.ServiceInfo(second.service_url))
            assert consumer.receive(10_000).data() == b"on-second"
        finally:
            client.close()
