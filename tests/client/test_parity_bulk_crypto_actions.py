"""The bulk reader and the official reader on messages they cannot decrypt.

``crypto_failure_action`` as in the official reader: CONSUME hands out each stored entry as it
is (compressed and encrypted; a batch as one message at its entry's position), DISCARD skips
them. FAIL differs on purpose: the official reader then never returns (it waits for a
message it can deliver), the bulk reader raises CryptoError.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from crypto_keys import KeyPair, rsa_pair

import starquake.client as sq
from starquake.broker.embedded import EmbeddedBroker
from starquake.client.asyncio import Client
from starquake.client.bulk import EARLIEST, BulkReader
from starquake.spark._plan import next_after

TOPIC = "persistent://public/default/bulk-crypto-actions"
CHUNKED = "persistent://public/default/bulk-crypto-chunked"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return rsa_pair(tmp_path_factory.mktemp("keys"), "actions")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory, keys: KeyPair) -> Iterator[EmbeddedBroker]:
    """Three single messages and a batch of three, encrypted (and LZ4-compressed) by the
    official client; on another topic, a chunked encrypted message."""
    data: Path = tmp_path_factory.mktemp("bulk-actions") / "data"
    with EmbeddedBroker(data, maxMessageSize=10_000) as broker:
        client = pulsar.Client(
            broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        key_reader = pulsar.CryptoKeyReader(keys.public, keys.private)
        for topic, mode in ((TOPIC, "single"), (TOPIC, "batched"), (CHUNKED, "chunked")):
            producer = client.create_producer(
                topic,
                encryption_key="bulk-key",
                crypto_key_reader=key_reader,
                batching_enabled=mode == "batched",
                batching_max_publish_delay_ms=60_000,
                chunking_enabled=mode == "chunked",
                compression_type=pulsar.CompressionType.LZ4,
            )
            for i in range(1 if mode == "chunked" else 3):
                body = os.urandom(25_000) if mode == "chunked" else b""
                producer.send_async(f"{mode}-{i}-".encode() + body, None)
            producer.flush()
            producer.close()
        client.close()
        yield broker


def _official(broker: EmbeddedBroker, action: str) -> list[tuple[int, int, bytes]]:
    client = pulsar.Client(
        broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        reader = client.create_reader(
            TOPIC,
            pulsar.MessageId.earliest,
            crypto_failure_action=getattr(pulsar.ConsumerCryptoFailureAction, action),
        )
        out = []
        while True:
            try:
                msg = reader.read_next(1000)
            except pulsar.Timeout:
                return out
            mid = msg.message_id()
            out.append((mid.ledger_id(), mid.entry_id(), msg.data()))
    finally:
        client.close()


async def _bulk(url: str, topic: str, action: str) -> list[tuple[int, int, bytes]]:
    client = Client(url)
    try:
        reader = await BulkReader.create(
            client,
            topic,
            EARLIEST,
            None,
            wait_timeout=10,
            crypto_failure_action=getattr(sq.ConsumerCryptoFailureAction, action),
        )
        last = await reader.get_last_position()
        assert last is not None
        reader.end = next_after(last)
        out: list[tuple[int, int, bytes]] = []
        try:
            while not reader.done:
                cols = await reader.read(100)
                for mid, value in zip(cols.message_ids, cols.values, strict=True):
                    parsed = sq.MessageId.deserialize(mid)
                    out.append((parsed.ledger_id(), parsed.entry_id(), value or b""))
        finally:
            await reader.close()
        return out
    finally:
        await client.close()


def test_consume_hands_out_the_stored_entries_as_the_official_reader_does(
    loaded: EmbeddedBroker,
) -> None:
    official = _official(loaded, "CONSUME")
    ours = asyncio.run(_bulk(loaded.service_url, TOPIC, "CONSUME"))
    assert len(ours) == 4  # three single messages and the batch as one
    assert ours == official
    assert all(b"single" not in value for _, _, value in ours)  # still encrypted


def test_discard_skips_them_as_the_official_reader_does(loaded: EmbeddedBroker) -> None:
    assert _official(loaded, "DISCARD") == []
    assert asyncio.run(_bulk(loaded.service_url, TOPIC, "DISCARD")) == []


def test_fail_raises(loaded: EmbeddedBroker) -> None:
    with pytest.raises(sq.CryptoError, match="give the reader a crypto_key_reader"):
        asyncio.run(_bulk(loaded.service_url, TOPIC, "FAIL"))


def test_a_chunked_message_is_not_handed_out_encrypted(loaded: EmbeddedBroker) -> None:
    """Its chunks are encrypted one by one: CONSUME cannot give one payload (the official
    reader, version 3.13, crashes the process on it)."""
    with pytest.raises(sq.CryptoError, match="chunked message cannot be read still encrypted"):
        asyncio.run(_bulk(loaded.service_url, CHUNKED, "CONSUME"))
    assert asyncio.run(_bulk(loaded.service_url, CHUNKED, "DISCARD")) == []
