"""BulkReader over a topic encrypted end to end (by the official client): with the key reader
it gives the plaintext rows of single, batched and chunked messages; without one, or with a
key that does not open them, it raises CryptoError instead of handing out ciphertext."""

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

TOPIC = "persistent://public/default/bulk-encrypted"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return rsa_pair(tmp_path_factory.mktemp("keys"), "bulk")


@pytest.fixture(scope="module")
def loaded(
    tmp_path_factory: pytest.TempPathFactory, keys: KeyPair
) -> Iterator[tuple[EmbeddedBroker, list[bytes]]]:
    data: Path = tmp_path_factory.mktemp("bulk-enc") / "data"
    with EmbeddedBroker(data, maxMessageSize=10_000) as broker:
        client = pulsar.Client(broker.service_url)
        reader = pulsar.CryptoKeyReader(keys.public, keys.private)
        sent: list[bytes] = []
        for mode in ("single", "batched", "chunked"):
            producer = client.create_producer(
                TOPIC,
                encryption_key="bulk-key",
                crypto_key_reader=reader,
                batching_enabled=mode == "batched",
                chunking_enabled=mode == "chunked",
                compression_type=pulsar.CompressionType.LZ4,
            )
            for i in range(3):
                value = f"{mode}-{i}-".encode() + (os.urandom(25_000) if mode == "chunked" else b"")
                producer.send_async(value, None)
                sent.append(value)
            producer.flush()
            producer.close()
        client.close()
        yield broker, sent


async def _read_all(url: str, key_reader: sq.CryptoKeyReader | None) -> list[bytes]:
    client = Client(url)
    try:
        reader = await BulkReader.create(
            client, TOPIC, EARLIEST, None, wait_timeout=10, crypto_key_reader=key_reader
        )
        last = await reader.get_last_position()
        assert last is not None
        reader.end = next_after(last)
        values: list[bytes] = []
        try:
            while not reader.done:
                cols = await reader.read(100)
                values.extend(v or b"" for v in cols.values)
        finally:
            await reader.close()
        return values
    finally:
        await client.close()


def test_rows_are_decrypted_with_the_key_reader(
    loaded: tuple[EmbeddedBroker, list[bytes]], keys: KeyPair
) -> None:
    broker, sent = loaded
    got = asyncio.run(_read_all(broker.service_url, sq.CryptoKeyReader(keys.public, keys.private)))
    assert got == sent


def test_without_a_key_reader_the_read_fails(loaded: tuple[EmbeddedBroker, list[bytes]]) -> None:
    broker, _ = loaded
    with pytest.raises(sq.CryptoError, match="encrypted end to end; give the reader"):
        asyncio.run(_read_all(broker.service_url, None))


def test_with_a_key_that_does_not_open_them_the_read_fails(
    loaded: tuple[EmbeddedBroker, list[bytes]], tmp_path: Path
) -> None:
    broker, _ = loaded
    other = rsa_pair(tmp_path, "other")
    with pytest.raises(sq.CryptoError, match="no private key of the key reader opens it"):
        asyncio.run(_read_all(broker.service_url, sq.CryptoKeyReader(other.public, other.private)))
